package main

import (
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// printArenas is the command hostfork-arenas of this test binary: on six
// threads of its own at once, it opens an SQLite database (mallocs on
// each thread, as a CLI call's cgo calls do), then prints how many malloc
// arenas the process has.
func printArenas() {
	var wg sync.WaitGroup
	hold := make(chan struct{})
	errs := make(chan error, 6)
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread() // a thread of its own, kept until exit
			db, err := sql.Open("sqlite3", ":memory:")
			if err == nil {
				_, err = db.Exec("CREATE TABLE t(x); INSERT INTO t VALUES (randomblob(4096))")
			}
			if err != nil {
				errs <- err
			}
			<-hold // every thread stays until all have allocated
		}()
	}
	time.Sleep(100 * time.Millisecond)
	close(hold)
	wg.Wait()
	select {
	case err := <-errs:
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	default:
	}
	fmt.Println(mallocArenas())
	os.Exit(0)
}

// TestOneArena: the CLI keeps glibc's malloc to one arena however many
// threads allocate (decision 68), unless the user set the arena count.
func TestOneArena(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	arenas := func(env ...string) int {
		t.Helper()
		cmd := &exec.Cmd{Path: exe, Args: []string{"hostfork-arenas"}, Env: append(os.Environ(), env...)}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("hostfork-arenas %q: %v", env, err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil || n < 0 {
			t.Fatalf("hostfork-arenas %q printed %q", env, out)
		}
		return n
	}
	if n := arenas("MALLOC_ARENA_MAX=", "GLIBC_TUNABLES="); n != 1 {
		t.Errorf("six threads allocating made %d malloc arenas, want 1", n)
	}
	// The user's own setting wins: glibc's default again.
	if n := arenas("MALLOC_ARENA_MAX=8"); n < 2 {
		t.Errorf("with MALLOC_ARENA_MAX=8, six threads made %d arenas, want more than 1 (the user's setting was overridden)", n)
	}
}
