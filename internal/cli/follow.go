package cli

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/habemus-papadum/hostfork"
)

// follow streams a command's stdout and stderr from offset 0 to this
// process's, until its tree has exited; the returned function waits until
// both are written out.
func follow(ctx context.Context, g *globals, b Backend, id string) func() {
	var wg sync.WaitGroup
	for _, s := range []struct {
		stream string
		w      io.Writer
	}{{"stdout", g.out}, {"stderr", g.err}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rd, err := b.Logs(ctx, id, hostfork.LogOptions{Stream: s.stream, Follow: true})
			if err == nil {
				_, err = io.Copy(s.w, rd)
				rd.Close()
			}
			if err != nil && ctx.Err() == nil {
				fmt.Fprintf(g.err, "hostfork: warning: following the %s of command %s: %s (see 'hostfork logs %s')\n", s.stream, id, clean(err.Error()), id)
			}
		}()
	}
	return wg.Wait
}
