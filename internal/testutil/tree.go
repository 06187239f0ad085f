package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// BenchFiles returns the tree sizes a benchmark should use:
// $HOSTFORK_BENCH_FILES (e.g. "2000,20000,200000"), else def.
func BenchFiles(tb testing.TB, def ...int) []int {
	tb.Helper()
	s := os.Getenv("HOSTFORK_BENCH_FILES")
	if s == "" {
		return def
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			tb.Fatalf("HOSTFORK_BENCH_FILES: %q", s)
		}
		out = append(out, n)
	}
	return out
}

// BuildTree writes n files of 10 KiB under dir, 100 per directory (about
// 200 MB for 20,000 files, like issue 3's reference figures).
func BuildTree(tb testing.TB, dir string, n int) {
	tb.Helper()
	data := make([]byte, 10<<10)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for i := 0; i < n; i++ {
		d := filepath.Join(dir, fmt.Sprintf("d%04d", i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(d, 0o755); err != nil {
				tb.Fatal(err)
			}
		}
		data[0] = byte(i)
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%03d", i%100)), data, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
}
