package view

import "testing"

func TestParseMountinfo(t *testing.T) {
	e, ok := parseMountinfoLine(`36 35 98:0 /mnt1 /mnt\040x rw,noatime master:1 - ext3 /dev/root rw,errors=continue`)
	if !ok || e.Target != "/mnt x" || e.FSType != "ext3" || e.Options != "rw,noatime" || e.Source != "/dev/root" {
		t.Fatalf("%+v %v", e, ok)
	}
	if _, ok := parseMountinfoLine("garbage"); ok {
		t.Fatal("garbage parsed")
	}
}

func FuzzParseMountinfo(f *testing.F) {
	f.Add(`36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue`)
	f.Fuzz(func(t *testing.T, s string) { parseMountinfoLine(s) })
}
