package session

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzReadFrame: any bytes decode to frames within the limit, or to an
// error; every frame decoded encodes back to the same bytes; a payload
// over the limit is never allocated.
func FuzzReadFrame(f *testing.F) {
	f.Add(AppendFrame(nil, Hello, HelloPayload(65536, NoInput)))
	f.Add(AppendFrame(AppendFrame(nil, Data, []byte("ls\n")), Resize, ResizePayload(80, 24)))
	f.Add([]byte{'d', 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{'x', 0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 9})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		var out []byte
		for {
			fr, err := ReadFrame(r, MaxClientPayload, nil)
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, ErrFrameTooLarge) {
					t.Fatalf("unexpected error %v", err)
				}
				break
			}
			if len(fr.Payload) > MaxClientPayload {
				t.Fatalf("payload of %d bytes", len(fr.Payload))
			}
			out = AppendFrame(out, fr.Type, fr.Payload)
			switch fr.Type {
			case Welcome:
				_, _ = ParseWelcome(fr.Payload)
			case Skip:
				_, _ = ParseSkip(fr.Payload)
			}
		}
		if !bytes.HasPrefix(b, out) {
			t.Fatalf("frames re-encode to %x, not a prefix of the input %x", out, b)
		}
	})
}

func TestCodec(t *testing.T) {
	w := make([]byte, 17)
	w[0] = KindTTY
	copy(w[1:], []byte{0, 0, 0, 0, 0, 0, 1, 0})
	copy(w[9:], []byte{0, 0, 0, 0, 0, 0, 2, 0})
	got, err := ParseWelcome(w)
	if err != nil || got != (Welcomed{KindTTY, 256, 512}) {
		t.Fatalf("welcome %+v %v", got, err)
	}
	if _, err := ReadFrame(bytes.NewReader([]byte{'d', 0, 1, 0, 0}), MaxClientPayload, nil); !errors.Is(err, ErrFrameTooLarge) {
		t.Fatalf("a 64 KiB client frame: %v", err)
	}
	if p := HelloPayload(-5, NoOutput); len(p) != 9 || p[7] != 0 || p[8] != NoOutput {
		t.Fatalf("hello %x", p)
	}
}
