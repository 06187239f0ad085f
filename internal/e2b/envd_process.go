package e2b

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/e2b/envdpb/process"
	"github.com/habemus-papadum/hostfork/internal/e2b/envdpb/process/processconnect"
)

// procService is process.Process: an E2B process is a hostfork command
// in the sandbox's environment, its pid the leader's pid.
type procService struct {
	processconnect.UnimplementedProcessHandler
	s *Server
}

// drainAfterExit is how long output is still followed after the leader's
// exit (the final drain Capture also gives): what a descendant writes
// later is not waited for.
const drainAfterExit = 200 * time.Millisecond

// maxReplay bounds the output Connect replays per stream.
const maxReplay = 4 << 20

// chunk is the most output one data event carries.
const chunk = 32 << 10

func (p *procService) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	env, _, err := envdOf(ctx)
	if err != nil {
		return err
	}
	m := req.Msg
	cfg := m.GetProcess()
	if cfg == nil || cfg.GetCmd() == "" {
		return badArg("start: give process.cmd")
	}
	cwd, err := commandCwd(ctx, env, cfg)
	if err != nil {
		return err
	}
	c := env.Command(append([]string{cfg.GetCmd()}, cfg.GetArgs()...)...)
	c.Cwd = cwd
	for _, k := range slices.Sorted(maps.Keys(cfg.GetEnvs())) {
		c.EnvSet = append(c.EnvSet, k+"="+cfg.GetEnvs()[k])
	}
	c.OwnerExit = "detach" // it outlives the request, and the server
	c.Purpose = "e2b"
	if m.Tag != nil {
		c.Labels = map[string]string{LabelTag: m.GetTag()}
	}
	tty := m.GetPty() != nil
	switch {
	case tty:
		c.TTY = true
		if c.Size, err = termSize(m.GetPty()); err != nil {
			return err
		}
	case m.Stdin == nil || m.GetStdin():
		c.Stdin = hostfork.StdinPipe // the protocol's default: stdin open
	}
	// The request's Connect-Timeout-Ms bounds the command, as in E2B: it
	// is stopped (reason timeout) when the request's time is up.
	if dl, ok := ctx.Deadline(); ok {
		if c.Timeout = time.Until(dl); c.Timeout <= 0 {
			return connect.NewError(connect.CodeDeadlineExceeded, errors.New("start: the request's timeout passed before the command started"))
		}
	}
	// Not the request's context: the command lives on when the client
	// goes (a background command), as an E2B process does.
	if err := c.Start(context.WithoutCancel(ctx)); err != nil {
		return rpcErr(err)
	}
	pid := pidOf(c.Record())
	if err := stream.Send(&process.StartResponse{Event: startEvent(pid)}); err != nil {
		return err
	}
	return follow(ctx, c, tty, 0, 0, keepalive(req.Header()), func(ev *process.ProcessEvent) error {
		return stream.Send(&process.StartResponse{Event: ev})
	})
}

func (p *procService) Connect(ctx context.Context, req *connect.Request[process.ConnectRequest], stream *connect.ServerStream[process.ConnectResponse]) error {
	env, _, err := envdOf(ctx)
	if err != nil {
		return err
	}
	c, err := findProcess(ctx, env, req.Msg.GetProcess())
	if err != nil {
		return err
	}
	rec := c.Record()
	// The output so far (its last maxReplay bytes per stream; a
	// terminal's last DefaultReplay, enough to redraw a screen), then
	// live: a client that reconnects loses nothing the logs kept.
	var offs [2]int64
	if rec.Session == "tty" {
		offs[0] = max(0, logSize(c, "stdout")-hostfork.DefaultReplay)
	} else {
		offs[0] = max(0, logSize(c, "stdout")-maxReplay)
		offs[1] = max(0, logSize(c, "stderr")-maxReplay)
	}
	if err := stream.Send(&process.ConnectResponse{Event: startEvent(pidOf(rec))}); err != nil {
		return err
	}
	return follow(ctx, c, rec.Session == "tty", offs[0], offs[1], keepalive(req.Header()), func(ev *process.ProcessEvent) error {
		return stream.Send(&process.ConnectResponse{Event: ev})
	})
}

func (p *procService) List(ctx context.Context, req *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	return unary(ctx, req, func(env *hostfork.Env, _ string, _ *process.ListRequest) (*process.ListResponse, error) {
		cs, err := env.Commands(ctx)
		if err != nil {
			return nil, rpcErr(err)
		}
		out := &process.ListResponse{}
		for _, c := range cs {
			rec := c.Record()
			if !running(rec) || len(rec.Argv) == 0 {
				continue
			}
			info := &process.ProcessInfo{
				// The values of a command's variables are not recorded
				// (only their names): none are listed.
				Config: &process.ProcessConfig{Cmd: rec.Argv[0], Args: rec.Argv[1:], Envs: map[string]string{}, Cwd: &rec.Cwd},
				Pid:    pidOf(rec),
			}
			if t, ok := rec.Labels[LabelTag]; ok {
				info.Tag = &t
			}
			out.Processes = append(out.Processes, info)
		}
		return out, nil
	})
}

func (p *procService) SendInput(ctx context.Context, req *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	return unary(ctx, req, func(env *hostfork.Env, _ string, m *process.SendInputRequest) (*process.SendInputResponse, error) {
		c, err := findProcess(ctx, env, m.GetProcess())
		if err != nil {
			return nil, err
		}
		return &process.SendInputResponse{}, sendInput(ctx, c, m.GetInput())
	})
}

// StreamInput takes a start naming the process, then its input in order
// (HTTP/2 clients; the SDKs over HTTP/1.1 use SendInput).
func (p *procService) StreamInput(ctx context.Context, st *connect.ClientStream[process.StreamInputRequest]) (*connect.Response[process.StreamInputResponse], error) {
	env, _, err := envdOf(ctx)
	if err != nil {
		return nil, err
	}
	var c *hostfork.Command
	for st.Receive() {
		switch ev := st.Msg().GetEvent().(type) {
		case *process.StreamInputRequest_Start:
			if c, err = findProcess(ctx, env, ev.Start.GetProcess()); err != nil {
				return nil, err
			}
		case *process.StreamInputRequest_Data:
			if c == nil {
				return nil, badArg("stream input: send the start event (the process) first")
			}
			if err := sendInput(ctx, c, ev.Data.GetInput()); err != nil {
				return nil, err
			}
		}
	}
	if err := st.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&process.StreamInputResponse{}), nil
}

func sendInput(ctx context.Context, c *hostfork.Command, in *process.ProcessInput) error {
	var data []byte
	switch v := in.GetInput().(type) {
	case *process.ProcessInput_Stdin:
		data = v.Stdin
	case *process.ProcessInput_Pty:
		data = v.Pty
	default:
		return badArg("send input: give input.stdin or input.pty")
	}
	err := c.Send(ctx, data)
	if errors.Is(err, api.ErrNoSession) {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d was started without stdin: start it with stdin: true: %w", pidOf(c.Record()), err))
	}
	return rpcErr(err)
}

func (p *procService) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	return unary(ctx, req, func(env *hostfork.Env, _ string, m *process.CloseStdinRequest) (*process.CloseStdinResponse, error) {
		c, err := findProcess(ctx, env, m.GetProcess())
		if err != nil {
			return nil, err
		}
		return &process.CloseStdinResponse{}, rpcErr(c.CloseStdin(ctx))
	})
}

// SendSignal stops the process's whole tree: SIGKILL at once, SIGTERM
// with the environment's grace, then SIGKILL (hostfork's tree stop).
func (p *procService) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	return unary(ctx, req, func(env *hostfork.Env, _ string, m *process.SendSignalRequest) (*process.SendSignalResponse, error) {
		// The request is checked before the process is looked for.
		var opts hostfork.StopOptions
		switch m.GetSignal() {
		case process.Signal_SIGNAL_SIGKILL:
			opts.Grace = -1
		case process.Signal_SIGNAL_SIGTERM:
		default:
			return nil, badArg("signal %v: send SIGNAL_SIGKILL or SIGNAL_SIGTERM (both stop the process's whole tree)", m.GetSignal())
		}
		c, err := findProcess(ctx, env, m.GetProcess())
		if err != nil {
			return nil, err
		}
		if _, err := c.StopTree(ctx, opts); err != nil && !errors.Is(err, api.ErrUnverified) {
			return nil, rpcErr(err)
		} else if err != nil {
			return nil, connect.NewError(connect.CodeInternal, err)
		}
		return &process.SendSignalResponse{}, nil
	})
}

// Update resizes a process's terminal.
func (p *procService) Update(ctx context.Context, req *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	return unary(ctx, req, func(env *hostfork.Env, _ string, m *process.UpdateRequest) (*process.UpdateResponse, error) {
		// The request is checked before the process is looked for.
		if m.GetPty().GetSize() == nil {
			return nil, badArg("update: give pty.size")
		}
		sz, err := termSize(m.GetPty())
		if err != nil {
			return nil, err
		}
		c, err := findProcess(ctx, env, m.GetProcess())
		if err != nil {
			return nil, err
		}
		if c.Record().Session != "tty" {
			return nil, badArg("process %d has no terminal: start it with a pty to resize it", pidOf(c.Record()))
		}
		return &process.UpdateResponse{}, rpcErr(c.Resize(ctx, sz.Cols, sz.Rows))
	})
}

// termSize is a pty's size, at most 65535 columns and rows.
func termSize(pty *process.PTY) (hostfork.TermSize, error) {
	sz := pty.GetSize()
	if sz.GetCols() > 65535 || sz.GetRows() > 65535 {
		return hostfork.TermSize{}, badArg("pty size %dx%d: at most 65535 columns and rows", sz.GetCols(), sz.GetRows())
	}
	return hostfork.TermSize{Cols: uint16(sz.GetCols()), Rows: uint16(sz.GetRows())}, nil
}

// commandCwd is the command's working directory: cwd in the view (the
// server user's home when not given), which must be a directory there.
func commandCwd(ctx context.Context, env *hostfork.Env, cfg *process.ProcessConfig) (string, error) {
	if cfg.Cwd == nil || cfg.GetCwd() == "" {
		d := home()
		if e, err := env.Stat(ctx, d); err != nil || e.Type != "dir" {
			d = "/"
		}
		return d, nil
	}
	d := sandboxPath(cfg.GetCwd())
	e, err := env.Stat(ctx, d)
	if err != nil || e.Type != "dir" {
		why := "not a directory"
		if err != nil {
			why = err.Error()
		}
		return "", badArg("cwd %q is not a directory in the sandbox (%s); paths are the sandbox's, resolved inside its view", cfg.GetCwd(), why)
	}
	return d, nil
}

// pidOf is the process id E2B's SDKs see: the leader's pid.
func pidOf(rec hostfork.CommandRecord) uint32 {
	if rec.Workload != nil {
		return uint32(rec.Workload.PID)
	}
	return 0
}

// running says whether a command's leader is (or may still be) running.
func running(rec hostfork.CommandRecord) bool {
	return !rec.Final() && rec.LeaderState != api.PhaseExited
}

// findProcess finds the running command a selector names among env's (the
// request's sandbox, whose failure came first): by its leader's pid, or by
// its tag.
func findProcess(ctx context.Context, env *hostfork.Env, sel *process.ProcessSelector) (*hostfork.Command, error) {
	var match func(hostfork.CommandRecord) bool
	var what string
	switch v := sel.GetSelector().(type) {
	case *process.ProcessSelector_Pid:
		match = func(r hostfork.CommandRecord) bool { return r.Workload != nil && uint32(r.Workload.PID) == v.Pid }
		what = fmt.Sprintf("pid %d", v.Pid)
	case *process.ProcessSelector_Tag:
		match = func(r hostfork.CommandRecord) bool { t, ok := r.Labels[LabelTag]; return ok && t == v.Tag }
		what = fmt.Sprintf("tag %q", v.Tag)
	default:
		return nil, badArg("give process.pid or process.tag")
	}
	cs, err := env.Commands(ctx)
	if err != nil {
		return nil, rpcErr(err)
	}
	for i := len(cs) - 1; i >= 0; i-- { // the newest first: a pid may be reused
		if rec := cs[i].Record(); running(rec) && match(rec) {
			return cs[i], nil
		}
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with %s not found (or it has exited)", what))
}

// logSize is the current size of a command's output file (0 if it has
// none yet).
func logSize(c *hostfork.Command, stream string) int64 {
	rec := c.Record()
	p := rec.StdoutPath
	if stream == "stderr" {
		p = rec.StderrPath
	}
	if p == "" {
		return 0
	}
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func startEvent(pid uint32) *process.ProcessEvent {
	return &process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: pid}}}
}

func dataEvent(stream int, tty bool, b []byte) *process.ProcessEvent {
	d := &process.ProcessEvent_DataEvent{}
	switch {
	case tty:
		d.Output = &process.ProcessEvent_DataEvent_Pty{Pty: b}
	case stream == 0:
		d.Output = &process.ProcessEvent_DataEvent_Stdout{Stdout: b}
	default:
		d.Output = &process.ProcessEvent_DataEvent_Stderr{Stderr: b}
	}
	return &process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: d}}
}

// endEvent is E2B's end of a process from the command's record: the exit
// code, or -1 and the signal; "exited" only for an exit of its own.
func endEvent(rec hostfork.CommandRecord) *process.ProcessEvent {
	e := &process.ProcessEvent_EndEvent{ExitCode: -1}
	switch {
	case rec.ExitCode != nil:
		e.ExitCode, e.Exited, e.Status = int32(*rec.ExitCode), true, fmt.Sprintf("exit status %d", *rec.ExitCode)
	case rec.Signal != nil:
		e.Status = "signal: " + syscall.Signal(*rec.Signal).String()
	default:
		e.Status = "unknown"
		msg := fmt.Sprintf("the exit status of command %s was not observed (%s)", rec.ID, rec.LeaderState)
		e.Error = &msg
	}
	if rec.StoppedByHostfork {
		msg := fmt.Sprintf("hostfork stopped command %s (%s)", rec.ID, rec.StopReason)
		e.Error = &msg
	}
	return &process.ProcessEvent{Event: &process.ProcessEvent_End{End: e}}
}

// follow sends a command's output from the given offsets of its stdout
// and stderr (a terminal's is all in stdout), keepalives every ka, and
// the end once the leader has exited and its output is sent. Output is
// followed until the whole tree is gone, or for drainAfterExit after the
// leader's exit if descendants live on; then what the logs hold is read
// to their end from the last byte sent, and the end follows.
func follow(ctx context.Context, c *hostfork.Command, tty bool, out, errOff int64, ka time.Duration, send func(*process.ProcessEvent) error) error {
	type data struct {
		stream int
		off    int64 // the log offset of b's first byte
		b      []byte
	}
	streams := []string{"stdout", "stderr"}
	sent := []int64{out, errOff} // the next offset to send, per stream
	if tty {
		streams = streams[:1]
	}
	ch := make(chan data)
	readerErr := make(chan error, len(streams))
	fctx, stopFollowing := context.WithCancel(ctx)
	defer stopFollowing()
	// A reader per stream follows its log; once following stops, what it
	// was about to send is dropped (the final read below sends it from
	// the last offset sent, so nothing is lost or sent twice).
	for i, name := range streams {
		go func() {
			rd, err := c.Logs(fctx, hostfork.LogOptions{Stream: name, Offset: sent[i], Follow: true})
			if err != nil {
				readerErr <- err
				return
			}
			defer rd.Close()
			off := sent[i]
			for {
				buf := make([]byte, chunk)
				n, err := rd.Read(buf)
				if n > 0 {
					select {
					case ch <- data{i, off, buf[:n]}:
						off += int64(n)
					case <-fctx.Done():
						return
					}
				}
				if err != nil {
					if err != io.EOF && fctx.Err() == nil {
						readerErr <- err
					}
					return
				}
			}
		}()
	}
	type result struct {
		rec hostfork.CommandRecord
		err error
	}
	leader := make(chan result, 1)
	go func() {
		rec, err := c.Wait(ctx)
		leader <- result{rec, err}
	}()
	// Once the whole tree is gone nothing more is written: no drain.
	tree := make(chan struct{})
	go func() {
		_, _ = c.WaitTree(fctx)
		close(tree)
	}()
	var tick <-chan time.Time
	if ka > 0 {
		t := time.NewTicker(ka)
		defer t.Stop()
		tick = t.C
	}
	var drain <-chan time.Time
	var final *hostfork.CommandRecord
	following := true
	for following || final == nil {
		select {
		case d := <-ch:
			if !following || d.off != sent[d.stream] {
				continue
			}
			if err := send(dataEvent(d.stream, tty, d.b)); err != nil {
				return err
			}
			sent[d.stream] += int64(len(d.b))
		case <-tick:
			if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Keepalive{Keepalive: &process.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
		case r := <-leader:
			if r.err != nil {
				return rpcErr(r.err)
			}
			final = &r.rec
			drain = time.After(drainAfterExit)
		case <-drain:
			following, drain = false, nil
		case <-tree:
			following, tree = false, nil
		case err := <-readerErr:
			if following {
				return rpcErr(err)
			}
		case <-ctx.Done():
			return rpcErr(ctx.Err())
		}
	}
	stopFollowing()
	for i, name := range streams {
		rd, err := c.Logs(ctx, hostfork.LogOptions{Stream: name, Offset: sent[i]})
		if err != nil {
			return rpcErr(err)
		}
		for {
			buf := make([]byte, chunk)
			n, err := rd.Read(buf)
			if n > 0 {
				if err := send(dataEvent(i, tty, buf[:n])); err != nil {
					rd.Close()
					return err
				}
			}
			if err != nil {
				rd.Close()
				if err != io.EOF {
					return rpcErr(err)
				}
				break
			}
		}
	}
	return send(endEvent(*final))
}
