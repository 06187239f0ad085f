package cli

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLinkModeOfThisProcess checks linkMode against the kernel's account:
// a dynamically linked process has its loader (ld-linux…, ld64…, ld-musl…)
// mapped, a static one has none. `go test` builds this binary dynamically;
// with the installed build's flags (scripts/build.sh --goflags) it is
// static, and the check holds either way.
func TestLinkModeOfThisProcess(t *testing.T) {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	want := "static"
	for _, line := range strings.Split(string(maps), "\n") {
		if f := strings.Fields(line); len(f) >= 6 {
			base := filepath.Base(f[5])
			if strings.HasPrefix(base, "ld-linux") || strings.HasPrefix(base, "ld64.so") || strings.HasPrefix(base, "ld-musl") {
				want = "dynamic"
			}
		}
	}
	t.Logf("this test binary is linked %s", want)
	if got := linkMode("/proc/self/exe"); got != want {
		t.Fatalf("linkMode(/proc/self/exe) = %q; the loader's mapping says %q", got, want)
	}
	if got := ReadBuildInfo().Link; got != want {
		t.Fatalf("ReadBuildInfo().Link = %q, want %q", got, want)
	}
}

// elfFile builds an ELF header of the given class (1: 32-bit, 2: 64-bit)
// and byte order followed by program headers of the given types.
func elfFile(class byte, bo binary.ByteOrder, types ...uint32) []byte {
	phsize := 56
	if class == 1 {
		phsize = 32
	}
	b := make([]byte, 64+phsize*len(types)) // the reader takes 64 bytes of header
	copy(b, "\x7fELF")
	b[4], b[6] = class, 1
	b[5] = 1 // little endian
	if bo == binary.ByteOrder(binary.BigEndian) {
		b[5] = 2
	}
	if class == 1 {
		bo.PutUint32(b[0x1c:], uint32(64)) // e_phoff, past the 64 bytes read
		bo.PutUint16(b[0x2a:], uint16(phsize))
		bo.PutUint16(b[0x2c:], uint16(len(types)))
	} else {
		bo.PutUint64(b[0x20:], uint64(64))
		bo.PutUint16(b[0x36:], uint16(phsize))
		bo.PutUint16(b[0x38:], uint16(len(types)))
	}
	for i, ty := range types {
		bo.PutUint32(b[64+i*phsize:], ty)
	}
	return b
}

func elf64(types ...uint32) []byte { return elfFile(2, binary.LittleEndian, types...) }

func TestLinkModeParsesProgramHeaders(t *testing.T) {
	const load, interp, dynamic, tls = 1, 3, 2, 7
	cases := []struct {
		name string
		file []byte
		want string
	}{
		{"interpreter", elf64(6, interp, load, load, dynamic), "dynamic"},
		{"no interpreter", elf64(load, load, tls), "static"},
		{"static-pie (dynamic section, no interpreter)", elf64(load, dynamic, tls), "static"},
		{"no program headers", elf64(), "unknown"},
		{"truncated program headers", elf64(load, interp)[:64+56+10], "unknown"},
		{"truncated header", elf64(load)[:40], "unknown"},
		{"ELF32 with an interpreter", elfFile(1, binary.LittleEndian, load, interp), "dynamic"},
		{"ELF32 without", elfFile(1, binary.LittleEndian, load, load), "static"},
		{"big-endian ELF64 with an interpreter", elfFile(2, binary.BigEndian, load, interp), "dynamic"},
		{"big-endian ELF32 without", elfFile(1, binary.BigEndian, load, dynamic), "static"},
		{"entry size not ELF64's", func() []byte { b := elf64(load, interp); b[0x36] = 64; return b }(), "unknown"},
		{"entry size not ELF32's", func() []byte { b := elfFile(1, binary.LittleEndian, load); b[0x2a] = 56; return b }(), "unknown"},
		{"not ELF", []byte(strings.Repeat("#!/bin/sh\n", 20)), "unknown"},
		{"empty", nil, "unknown"},
	}
	dir := t.TempDir()
	for _, c := range cases {
		p := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_"))
		if err := os.WriteFile(p, c.file, 0o600); err != nil {
			t.Fatal(err)
		}
		if got := linkMode(p); got != c.want {
			t.Errorf("%s: linkMode = %q, want %q", c.name, got, c.want)
		}
	}
	if got := linkMode(filepath.Join(dir, "missing")); got != "unknown" {
		t.Errorf("missing file: linkMode = %q, want unknown", got)
	}
}
