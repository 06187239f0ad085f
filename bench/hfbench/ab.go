package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// sample is one measured run of a command (P instances in -par mode).
type sample struct {
	WallMS   float64   `json:"wall_ms"`
	CPUMS    float64   `json:"cpu_ms"` // user + system, waited-for descendants included
	UserMS   float64   `json:"user_ms"`
	SysMS    float64   `json:"sys_ms"`
	MaxRSSKB int64     `json:"maxrss_kb"`          // wait4's ru_maxrss: the largest process of the tree
	HWMKB    int64     `json:"hwm_kb,omitempty"`   // VmHWM of the first step's own process (-hwm)
	AnonKB   int64     `json:"anon_kb,omitempty"`  // the largest RssAnon seen of that process (-hwm)
	StepsMS  []float64 `json:"steps_ms,omitempty"` // wall time of each step (commands of several steps, -par 1)
	Load1    float64   `json:"load1"`
}

type command struct {
	Name    string     `json:"name"`
	Cmd     string     `json:"cmd"`
	Prepare string     `json:"prepare,omitempty"`
	steps   [][]string // argv per step
	prep    []string
	capture bool       // a later step uses $1
	run     *clientRun // "@run SOCKET ARGV...": in this process, through the client (client.go)
	Samples []sample   `json:"samples"`
}

type report struct {
	Title    string     `json:"title"`
	Started  time.Time  `json:"started"`
	Par      int        `json:"par"`
	Rounds   int        `json:"rounds"`
	LoadPre  string     `json:"load_before"`
	LoadPost string     `json:"load_after"`
	Commands []*command `json:"commands"`
}

type prepFlags map[string]string

func (p prepFlags) String() string { return "" }
func (p prepFlags) Set(v string) error {
	name, cmd, ok := strings.Cut(v, "=")
	if !ok {
		return fmt.Errorf("-prepare %q: want NAME=COMMAND", v)
	}
	p[name] = cmd
	return nil
}

func abMain(args []string) error {
	fs := flag.NewFlagSet("ab", flag.ExitOnError)
	rounds := fs.Int("rounds", 20, "samples per command")
	warmup := fs.Int("warmup", 2, "unmeasured rounds first")
	par := fs.Int("par", 1, "instances started at once per sample (start all, wait all)")
	hwm := fs.Bool("hwm", false, "poll VmHWM of the first step's process while it runs")
	ref := fs.String("ref", "", "reference command for the ratios (default: the last one)")
	jsonOut := fs.String("json", "", "write every sample to this file")
	title := fs.String("title", "", "title of the table")
	bytesPer := fs.Float64("bytes", 0, "bytes moved per sample: adds a GiB/s column")
	prep := prepFlags{}
	fs.Var(prep, "prepare", "NAME=COMMAND run (untimed) before each sample of NAME; repeatable")
	fs.Parse(args)
	if fs.NArg() == 0 {
		return fmt.Errorf("ab: no commands")
	}
	rep := &report{Title: *title, Started: time.Now().UTC(), Par: *par, Rounds: *rounds, LoadPre: loadavg()}
	for _, a := range fs.Args() {
		name, cmd, ok := strings.Cut(a, "=")
		if !ok || name == "" {
			return fmt.Errorf("ab: %q: want NAME=COMMAND", a)
		}
		c := &command{Name: name, Cmd: cmd}
		if rest, ok := strings.CutPrefix(cmd, "@run "); ok {
			w, err := words(rest)
			if err != nil {
				return fmt.Errorf("ab: %s: %w", name, err)
			}
			if c.run, err = newClientRun(w); err != nil {
				return fmt.Errorf("ab: %s: %w", name, err)
			}
		}
		for i, st := range strings.Split(cmd, " ;; ") {
			w, err := words(st)
			if err != nil {
				return fmt.Errorf("ab: %s: %w", name, err)
			}
			if len(w) == 0 {
				return fmt.Errorf("ab: %s: empty step", name)
			}
			if i > 0 && strings.Contains(st, "$1") {
				c.capture = true
			}
			c.steps = append(c.steps, w)
		}
		if p, ok := prep[name]; ok {
			w, err := words(p)
			if err != nil {
				return fmt.Errorf("ab: prepare %s: %w", name, err)
			}
			c.Prepare, c.prep = p, w
		}
		rep.Commands = append(rep.Commands, c)
	}
	refName := *ref
	if refName == "" {
		refName = rep.Commands[len(rep.Commands)-1].Name
	}
	n := len(rep.Commands)
	for r := -*warmup; r < *rounds; r++ {
		for k := 0; k < n; k++ {
			c := rep.Commands[(k+max(r, 0))%n]
			if c.prep != nil {
				if out, err := exec.Command(c.prep[0], c.prep[1:]...).CombinedOutput(); err != nil {
					return fmt.Errorf("prepare %s: %v: %s", c.Name, err, out)
				}
			}
			s, err := measure(c, *par, *hwm)
			if err != nil {
				return err
			}
			if r >= 0 {
				s.Load1 = load1()
				c.Samples = append(c.Samples, s)
			}
		}
	}
	rep.LoadPost = loadavg()
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(rep, "", " ")
		if err := os.WriteFile(*jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	printReport(rep, refName, *bytesPer)
	return nil
}

// measure runs one sample: par instances of c, each its steps in order.
func measure(c *command, par int, hwm bool) (sample, error) {
	var (
		mu   sync.Mutex
		s    sample
		errs []error
		wg   sync.WaitGroup
	)
	start := time.Now()
	for i := 0; i < par; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var one sample
			var err error
			if c.run != nil {
				one, err = c.run.one()
			} else {
				one, err = runSteps(c, hwm)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			s.CPUMS += one.CPUMS
			s.UserMS += one.UserMS
			s.SysMS += one.SysMS
			s.MaxRSSKB = max(s.MaxRSSKB, one.MaxRSSKB)
			s.HWMKB = max(s.HWMKB, one.HWMKB)
			s.AnonKB = max(s.AnonKB, one.AnonKB)
			if par == 1 && len(one.StepsMS) > 1 {
				s.StepsMS = one.StepsMS
			}
		}()
	}
	wg.Wait()
	s.WallMS = ms(time.Since(start))
	if len(errs) > 0 {
		return s, fmt.Errorf("%s: %v (and %d more failures)", c.Name, errs[0], len(errs)-1)
	}
	return s, nil
}

func runSteps(c *command, hwm bool) (sample, error) {
	var s sample
	first := ""
	for i, argv := range c.steps {
		if i > 0 && first != "" {
			argv = append([]string(nil), argv...)
			for j := range argv {
				argv[j] = strings.ReplaceAll(argv[j], "$1", first)
			}
		}
		cmd := exec.Command(argv[0], argv[1:]...)
		var out, errb bytes.Buffer
		if i == 0 && c.capture {
			cmd.Stdout = &out
		} else {
			cmd.Stdout = devNull
		}
		cmd.Stderr = &errb
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			return s, err
		}
		var peak chan [2]int64
		if hwm && i == 0 {
			peak = make(chan [2]int64, 1)
			go pollHWM(cmd.Process.Pid, peak)
		}
		err := cmd.Wait()
		s.StepsMS = append(s.StepsMS, ms(time.Since(t0)))
		if peak != nil {
			p := <-peak
			s.HWMKB, s.AnonKB = p[0], p[1]
		}
		if err != nil {
			return s, fmt.Errorf("%q: %v: %s", strings.Join(argv, " "), err, bytes.TrimSpace(errb.Bytes()))
		}
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			u := tv(ru.Utime)
			sy := tv(ru.Stime)
			s.UserMS += u
			s.SysMS += sy
			s.CPUMS += u + sy
			s.MaxRSSKB = max(s.MaxRSSKB, ru.Maxrss)
		}
		if i == 0 && c.capture {
			first = strings.TrimSpace(out.String())
			if first == "" {
				return s, fmt.Errorf("%q printed nothing for $1", strings.Join(argv, " "))
			}
		}
	}
	return s, nil
}

// pollHWM reads /proc/PID/status every 10 ms until the process is gone
// (a zombie's status has no Vm lines) and sends the last VmHWM (the peak
// RSS, file pages included) and the largest RssAnon seen.
func pollHWM(pid int, peak chan<- [2]int64) {
	var best [2]int64
	path := "/proc/" + strconv.Itoa(pid) + "/status"
	field := func(b []byte, name string) (int64, bool) {
		i := bytes.Index(b, []byte(name))
		if i < 0 {
			return 0, false
		}
		f := strings.Fields(string(b[i+len(name):]))
		if len(f) == 0 {
			return 0, false
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		return v, err == nil
	}
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			break
		}
		h, ok := field(b, "VmHWM:")
		if !ok {
			break
		}
		best[0] = max(best[0], h)
		if a, ok := field(b, "RssAnon:"); ok {
			best[1] = max(best[1], a)
		}
		time.Sleep(10 * time.Millisecond)
	}
	peak <- best
}

var devNull, _ = os.OpenFile(os.DevNull, os.O_WRONLY, 0)

func tv(t syscall.Timeval) float64 { return float64(t.Sec)*1e3 + float64(t.Usec)/1e3 }
func ms(d time.Duration) float64   { return float64(d.Nanoseconds()) / 1e6 }

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func load1() float64 {
	v, _ := strconv.ParseFloat(strings.Fields(loadavg() + " 0")[0], 64)
	return v
}

// quantile is the nearest-rank quantile of v (sorted in place).
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	sort.Float64s(v)
	i := int(math.Ceil(q*float64(len(v)))) - 1
	return v[min(max(i, 0), len(v)-1)]
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	w := append([]float64(nil), v...)
	sort.Float64s(w)
	if len(w)%2 == 1 {
		return w[len(w)/2]
	}
	return (w[len(w)/2-1] + w[len(w)/2]) / 2
}

func col(ss []sample, f func(sample) float64) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = f(s)
	}
	return out
}

func printReport(rep *report, refName string, bytesPer float64) {
	var ref *command
	for _, c := range rep.Commands {
		if c.Name == refName {
			ref = c
		}
	}
	if rep.Title != "" {
		fmt.Printf("### %s\n\n", rep.Title)
	}
	hasHWM := false
	for _, c := range rep.Commands {
		for _, s := range c.Samples {
			hasHWM = hasHWM || s.HWMKB > 0
		}
	}
	head := "| command | n | wall median ms | p10 | p90 | p99 | max | CPU median ms | CPU p90 | maxrss KiB |"
	if hasHWM {
		head += " VmHWM KiB | peak RssAnon KiB |"
	}
	if bytesPer > 0 {
		head += " GiB/s |"
	}
	if ref != nil {
		rn := strings.ReplaceAll(ref.Name, "|", `\|`)
		head += " wall × " + rn + " | CPU × " + rn + " |"
	}
	fmt.Println(head)
	fmt.Println(strings.Repeat("|---", strings.Count(head, "|")-strings.Count(head, `\|`)-1) + "|")
	refWall, refCPU := 0.0, 0.0
	if ref != nil {
		refWall = median(col(ref.Samples, func(s sample) float64 { return s.WallMS }))
		refCPU = median(col(ref.Samples, func(s sample) float64 { return s.CPUMS }))
	}
	for _, c := range rep.Commands {
		w := col(c.Samples, func(s sample) float64 { return s.WallMS })
		cpu := col(c.Samples, func(s sample) float64 { return s.CPUMS })
		rss := col(c.Samples, func(s sample) float64 { return float64(s.MaxRSSKB) })
		mw, mc := median(w), median(cpu)
		row := fmt.Sprintf("| %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f |", strings.ReplaceAll(c.Name, "|", `\|`), len(w), mw,
			quantile(w, .1), quantile(w, .9), quantile(w, .99), quantile(w, 1), mc, quantile(cpu, .9), median(rss))
		if c.run != nil {
			// No CPU time: the server is not this process's child.
			row = fmt.Sprintf("| %s | %d | %.2f | %.2f | %.2f | %.2f | %.2f | — | — | — |", strings.ReplaceAll(c.Name, "|", `\|`), len(w), mw,
				quantile(w, .1), quantile(w, .9), quantile(w, .99), quantile(w, 1))
		}
		if hasHWM {
			row += fmt.Sprintf(" %.0f | %.0f |", median(col(c.Samples, func(s sample) float64 { return float64(s.HWMKB) })),
				median(col(c.Samples, func(s sample) float64 { return float64(s.AnonKB) })))
		}
		if bytesPer > 0 {
			row += fmt.Sprintf(" %.2f |", bytesPer/(1<<30)/(mw/1000))
		}
		switch {
		case ref != nil && c.run != nil:
			row += fmt.Sprintf(" %.2f | — |", mw/refWall)
		case ref != nil:
			row += fmt.Sprintf(" %.2f | %.2f |", mw/refWall, mc/refCPU)
		}
		fmt.Println(row)
	}
	if rep.Par > 1 {
		// Few samples of many instances: every one, in round order.
		fmt.Println()
		for _, c := range rep.Commands {
			var v []string
			for _, s := range c.Samples {
				v = append(v, fmt.Sprintf("%.0f", s.WallMS))
			}
			fmt.Printf("%s, wall ms per round: %s\n", c.Name, strings.Join(v, " "))
		}
	}
	for _, c := range rep.Commands {
		if len(c.steps) < 2 || len(c.Samples) == 0 || len(c.Samples[0].StepsMS) != len(c.steps) {
			continue
		}
		var parts []string
		for i, st := range c.steps {
			v := col(c.Samples, func(s sample) float64 { return s.StepsMS[i] })
			parts = append(parts, fmt.Sprintf("%s: %.2f (p90 %.2f)", strings.TrimSpace(filepath.Base(st[0])+" "+stepVerb(st)), median(v), quantile(v, .9)))
		}
		fmt.Printf("\n%s, median ms per step: %s\n", c.Name, strings.Join(parts, "; "))
	}
	var loads []float64
	for _, c := range rep.Commands {
		loads = append(loads, col(c.Samples, func(s sample) float64 { return s.Load1 })...)
	}
	fmt.Printf("\n%d rounds interleaved (order rotated each round), %d instance(s) per sample; load before %s, after %s; 1-min load during: min %.2f, median %.2f, max %.2f\n\n",
		rep.Rounds, rep.Par, rep.LoadPre, rep.LoadPost, quantile(loads, 0), median(loads), quantile(loads, 1))
}

// stepVerb names a step by its first argument that is not a flag or a
// flag's value (good enough for "hostfork --root X create ...").
func stepVerb(argv []string) string {
	if !strings.Contains(filepath.Base(argv[0]), "hostfork") {
		return ""
	}
	for i := 1; i < len(argv); i++ {
		if strings.HasPrefix(argv[i], "-") {
			if !strings.Contains(argv[i], "=") && i+1 < len(argv) && argv[i] == "--root" {
				i++
			}
			continue
		}
		return argv[i]
	}
	return ""
}

// words splits a command line like a shell: blanks separate words; single
// quotes keep everything, double quotes keep everything but \" and \\;
// nothing is expanded.
func words(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	in := false
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unclosed ' in %q", s)
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			in = true
		case ch == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unclosed \" in %q", s)
			}
			in = true
		case ch == ' ' || ch == '\t' || ch == '\n':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteByte(ch)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out, nil
}
