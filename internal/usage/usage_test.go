package usage

import "testing"

func TestParseBtrfsDu(t *testing.T) {
	out := "     Total   Exclusive  Set shared  Filename\n  20480000      12288    20467712  /mnt/pool/x/tree\n"
	tot, ex, sh, err := parseBtrfsDu(out)
	if err != nil || tot != 20480000 || ex != 12288 || sh != 20467712 {
		t.Fatalf("%d %d %d %v", tot, ex, sh, err)
	}
	for _, bad := range []string{"", "Total Exclusive\n", "h\nx y z w"} {
		if _, _, _, err := parseBtrfsDu(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func FuzzParseBtrfsDu(f *testing.F) {
	f.Add("     Total   Exclusive  Set shared  Filename\n  1  2  3  /x\n")
	f.Fuzz(func(t *testing.T, s string) { _, _, _, _ = parseBtrfsDu(s) })
}
