package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/doctor"
)

const hugeSize = 2 << 20

// writeInBlocks copies src to a new executable dst with writes of block
// bytes at offsets that are multiples of block.
func writeInBlocks(t *testing.T, src, dst string, block int) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < len(b) && err == nil; off += block {
		_, err = f.Write(b[off:min(off+block, len(b))])
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// fileHugeFolios reports whether this kernel and the file system of dir
// keep a file written in 2 MiB blocks as 2 MiB folios and map them with
// one entry: a 4 MiB file so written, its first 2 MiB mapped at an
// aligned address and touched, must show in smaps' FilePmdMapped. The
// control for TestCodePages, independent of hostfork's code.
func fileHugeFolios(t *testing.T, dir string) bool {
	t.Helper()
	path := filepath.Join(dir, "control")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, hugeSize)
	for i := range block {
		block[i] = byte(i)
	}
	for i := 0; i < 2; i++ {
		if _, err := f.Write(block); err != nil {
			t.Fatal(err)
		}
	}
	// A 4 MiB reservation holds a 2 MiB-aligned 2 MiB range.
	res, err := unix.Mmap(-1, 0, 2*hugeSize, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(res)
	base := uintptr(unsafe.Pointer(&res[0]))
	aligned := (base + hugeSize - 1) &^ (hugeSize - 1)
	p, err := unix.MmapPtr(int(f.Fd()), 0, unsafe.Pointer(&res[aligned-base]), hugeSize, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_FIXED)
	if err != nil {
		t.Fatal(err)
	}
	if got := unsafe.Slice((*byte)(p), hugeSize)[12345]; got != byte(12345%256) {
		t.Fatalf("the control mapping reads %d at 12345", got)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	head := strconv.FormatUint(uint64(aligned), 16) + "-"
	in := false
	for _, line := range strings.Split(string(smaps), "\n") {
		if smapsHeader(strings.Fields(line)) {
			in = strings.HasPrefix(line, head)
			continue
		}
		if v, ok := strings.CutPrefix(line, "FilePmdMapped:"); ok && in {
			return strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")) != "0"
		}
	}
	return false
}

// TestCodePages: doctor's exe.code-pages tells a binary whose page cache
// holds 2 MiB folios (written in 2 MiB blocks, as scripts/build.sh
// installs it) from one written in smaller blocks, from what the kernel
// reports of the running process (entry 78), where the kernel and file
// system keep such folios at all (the control).
func TestCodePages(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	huge := fileHugeFolios(t, dir)
	t.Logf("2 MiB folios for files written in 2 MiB blocks here: %v", huge)
	for _, tc := range []struct {
		block int
		want  bool // mapped in 2 MiB pages, where the kernel can
	}{{hugeSize, true}, {64 << 10, false}} {
		exe := filepath.Join(dir, "hostfork-"+strconv.Itoa(tc.block>>10)+"k")
		writeInBlocks(t, c.exe, exe, tc.block)
		cmd := c.command("doctor", "--json")
		cmd.Path = exe
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("doctor --json from %s: %v", exe, err)
		}
		var r doctor.Report
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("doctor --json: %v\n%s", err, out)
		}
		var ck *doctor.Check
		for i := range r.Checks {
			if r.Checks[i].ID == "exe.code-pages" {
				ck = &r.Checks[i]
			}
		}
		if ck == nil {
			t.Fatal("no exe.code-pages check")
		}
		k := r.Facts.Code
		t.Logf("written in %d KiB blocks: %+v; %s: %s", tc.block>>10, k, ck.Status, ck.Detail)
		if k.Err != "" || k.Exe != exe || k.SizeKiB == 0 || k.AlignedKiB == 0 || k.AlignedKiB > k.SizeKiB || k.HugeKiB > k.AlignedKiB {
			t.Errorf("code pages of %s: %+v", exe, k)
		}
		switch mapped := k.HugeKiB > 0; {
		case mapped != (huge && tc.want):
			t.Errorf("written in %d KiB blocks: %d KiB mapped in 2 MiB pages; want them %v (kernel support: %v)", tc.block>>10, k.HugeKiB, huge && tc.want, huge)
		case mapped && k.HugeKiB != k.AlignedKiB:
			// Every such range was touched by the time doctor read.
			t.Errorf("written in 2 MiB blocks: %d of %d KiB mapped in 2 MiB pages; want all", k.HugeKiB, k.AlignedKiB)
		case mapped && ck.Status != doctor.OK:
			t.Errorf("mapped in 2 MiB pages, but the check says %s", ck.Status)
		case !mapped && (ck.Status != doctor.Degraded || !strings.Contains(ck.Remedy, "bs=2M")):
			t.Errorf("not mapped in 2 MiB pages, but the check says %s (remedy %q)", ck.Status, ck.Remedy)
		}
	}
}

// smapsHeader reports whether the fields of a /proc/PID/smaps line are a
// mapping's header ("start-end perms offset dev inode [path]"), not one
// of its "Key: value" lines.
func smapsHeader(fields []string) bool {
	return len(fields) >= 5 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":")
}
