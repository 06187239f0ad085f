package server

import (
	"cmp"
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/api"
)

// scrapeTimeout bounds the library calls of one scrape.
const scrapeTimeout = 20 * time.Second

// Metric descriptions. Names follow cAdvisor and systemd_exporter; labels
// are ids and fixed vocabularies only, never free-form labels, except in
// hostfork_env_info, whose one series per environment carries them for
// joins.
var (
	descEnvs         = prometheus.NewDesc("hostfork_envs", "Environments by recorded state.", []string{"state"}, nil)
	descCommands     = prometheus.NewDesc("hostfork_commands", "Commands by record state (record_state).", []string{"state"}, nil)
	descMemory       = prometheus.NewDesc("hostfork_env_memory_bytes", "Memory charged to the environment's limit group now (memory.current or memory.usage_in_bytes).", []string{"env"}, nil)
	descMemoryLimit  = prometheus.NewDesc("hostfork_env_memory_limit_bytes", "The environment's enforced memory limit.", []string{"env"}, nil)
	descOOMKills     = prometheus.NewDesc("hostfork_env_oom_kills_total", "Processes of the environment the kernel's OOM killer killed.", []string{"env"}, nil)
	descPids         = prometheus.NewDesc("hostfork_env_pids", "Processes in the environment now (pids.current).", []string{"env"}, nil)
	descCPU          = prometheus.NewDesc("hostfork_env_cpu_seconds_total", "CPU time the environment used (cpuacct.usage or cpu.stat usage_usec).", []string{"env"}, nil)
	descSlots        = prometheus.NewDesc("hostfork_admission_slots", "Admission slots for agent workloads: total, used, free.", []string{"state"}, nil)
	descPaused       = prometheus.NewDesc("hostfork_paused", "1 when admission is paused.", nil, nil)
	descUnverified   = prometheus.NewDesc("hostfork_unverified_trees", "Command trees whose exit can't be verified.", nil, nil)
	descStoreBytes   = prometheus.NewDesc("hostfork_store_bytes", "Apparent size of the store's own files by kind: logs, exports, registry.", []string{"kind"}, nil)
	descBacklog      = prometheus.NewDesc("hostfork_cleanup_backlog", "Stopped environments past their retention that gc has not handled.", nil, nil)
	descOOMTotal     = prometheus.NewDesc("hostfork_oom_kills_total", "Commands a process of which the kernel's OOM killer killed, since the store was made (from the registry's event counts: kept across restarts and retention).", nil, nil)
	descFinished     = prometheus.NewDesc("hostfork_commands_finished_total", "Commands whose whole tree exited, by stop reason (none: nothing stopped it), since the store was made (from the registry's event counts).", []string{"stop_reason"}, nil)
	descCreatedTotal = prometheus.NewDesc("hostfork_envs_created_total", "Environments that became active, since the store was made (from the registry's event counts).", nil, nil)
	descScrapeErrors = prometheus.NewDesc("hostfork_scrape_errors", "Sources of this scrape that failed (their series are omitted).", []string{"source"}, nil)
)

func (s *Server) initMetrics() error {
	s.reg = prometheus.NewRegistry()
	s.launches = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "hostfork_launch_duration_seconds",
		Help:    "Time to start a command through the server (POST /v1/envs/{id}/commands: registration, guardian, release).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	})
	for _, c := range []prometheus.Collector{
		s.launches,
		&collector{s: s},
		&infoCollector{s: s},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	} {
		if err := s.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) metricsHTTP() http.Handler {
	return promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

func (s *Server) metrics(w http.ResponseWriter, r *http.Request) (any, error) {
	s.metricsHTTP().ServeHTTP(w, r)
	return nil, nil
}

// collector reads every value at scrape time from the library: the
// records, and the kernel's counters of each live environment's limit
// groups (api.Env.LimitsNow). An unknown counter is omitted, never 0.
type collector struct{ s *Server }

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descEnvs, descCommands, descMemory, descMemoryLimit, descOOMKills, descPids, descCPU,
		descSlots, descPaused, descUnverified, descStoreBytes, descBacklog, descOOMTotal, descFinished, descCreatedTotal, descScrapeErrors} {
		ch <- d
	}
}

func gauge(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func counter(ch chan<- prometheus.Metric, d *prometheus.Desc, v float64, labels ...string) {
	ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
}

// infoCollector writes hostfork_env_info: 1 for each environment the
// registry holds, with its purpose and labels, to join the per-environment
// series with (on env). Its label names depend on the environments'
// labels, so it describes nothing (an unchecked collector).
type infoCollector struct{ s *Server }

func (c *infoCollector) Describe(chan<- *prometheus.Desc) {}

func (c *infoCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	envs, err := c.s.h.Envs(ctx, hostfork.EnvFilter{})
	if err != nil {
		c.s.cfg.Logf("metrics: env info: %v", err)
		return
	}
	names, keys := envInfoLabels(envs)
	d := prometheus.NewDesc("hostfork_env_info", "1 for each environment the registry holds, with its purpose and labels (label_<key>, the key's other characters as _; \"\" where it has none).",
		append([]string{"env", "purpose"}, names...), nil)
	for i := range envs {
		vals := []string{envs[i].ID, envs[i].Purpose}
		for _, k := range keys {
			vals = append(vals, envs[i].Labels[k])
		}
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, 1, vals...)
	}
}

// envInfoLabels is the union of the environments' label keys, as
// Prometheus label names (label_ and the key, its characters outside
// [a-zA-Z0-9_] as _) and the keys they stand for. Of keys that come out
// the same, the first in sorted order is kept.
func envInfoLabels(envs []hostfork.EnvRecord) (names, keys []string) {
	all := map[string]bool{}
	for i := range envs {
		for k := range envs[i].Labels {
			all[k] = true
		}
	}
	sorted := slices.Sorted(maps.Keys(all))
	seen := map[string]bool{}
	for _, k := range sorted {
		n := "label_" + strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' {
				return r
			}
			return '_'
		}, k)
		if seen[n] {
			continue
		}
		seen[n] = true
		names, keys = append(names, n), append(keys, k)
	}
	return names, keys
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	h := c.s.h
	failed := func(source string, err error) {
		c.s.cfg.Logf("metrics: %s: %v", source, err)
		gauge(ch, descScrapeErrors, 1, source)
	}

	if envs, err := h.Envs(ctx, hostfork.EnvFilter{WithCommands: true}); err != nil {
		failed("envs", err)
	} else {
		n := map[hostfork.EnvState]int{}
		for _, st := range []hostfork.EnvState{hostfork.EnvCreating, hostfork.EnvActive, hostfork.EnvStopping, hostfork.EnvStopped, hostfork.EnvFailed} {
			n[st] = 0
		}
		for i := range envs {
			n[envs[i].State]++
			envMetrics(ch, &envs[i])
		}
		for st, v := range n {
			gauge(ch, descEnvs, float64(v), string(st))
		}
	}

	if cmds, err := h.Commands(ctx, hostfork.CommandFilter{}); err != nil {
		failed("commands", err)
	} else {
		n := map[hostfork.CommandState]int{}
		for _, st := range []hostfork.CommandState{hostfork.CommandReserved, hostfork.CommandRunning, hostfork.CommandExited, hostfork.CommandFailed, hostfork.CommandUnverified} {
			n[st] = 0
		}
		for _, cm := range cmds {
			n[cm.State]++
		}
		for st, v := range n {
			gauge(ch, descCommands, float64(v), string(st))
		}
	}

	if counts, err := h.EventCounts(ctx); err != nil {
		failed("event_counts", err)
	} else {
		var created, oom int64
		finished := map[string]int64{"none": 0}
		for _, r := range enums[reflect.TypeFor[api.StopReason]()] {
			finished[r] = 0
		}
		for _, n := range counts {
			switch n.Kind {
			case api.EventEnvCreated:
				created += n.Count
			case api.EventOOM:
				oom += n.Count
			case api.EventCommandTreeExit:
				r := cmp.Or(string(n.Reason), "none")
				finished[r] += n.Count
			}
		}
		counter(ch, descCreatedTotal, float64(created))
		counter(ch, descOOMTotal, float64(oom))
		for r, v := range finished {
			counter(ch, descFinished, float64(v), r)
		}
	}

	if capa, err := h.Capacity(ctx); err != nil {
		failed("capacity", err)
	} else {
		gauge(ch, descSlots, float64(capa.Slots), "total")
		gauge(ch, descSlots, float64(capa.Used), "used")
		gauge(ch, descSlots, float64(capa.Free), "free")
		p := 0.0
		if capa.Paused {
			p = 1
		}
		gauge(ch, descPaused, p)
	}

	if u, err := h.Usage(ctx); err != nil {
		failed("usage", err)
	} else {
		gauge(ch, descUnverified, float64(u.UnverifiedCmds))
		gauge(ch, descStoreBytes, float64(u.LogBytes), "logs")
		gauge(ch, descStoreBytes, float64(u.ExportBytes), "exports")
		gauge(ch, descStoreBytes, float64(u.RegistryBytes), "registry")
		gauge(ch, descBacklog, float64(u.CleanupBacklog))
	}
}

// limitGroups is the part of api.Env.Limits (the limit groups' record)
// the metrics read: which resources have a mechanism, and the v1 dirs.
type limitGroups struct {
	Mechanisms map[string]string `json:"mechanisms"`
	V1         map[string]string `json:"v1"`
}

// envSpecLimits is the requested budget in api.Env.Spec.
type envSpecLimits struct {
	Limits struct {
		Memory json.RawMessage `json:"memory"`
	} `json:"limits"`
}

func envMetrics(ch chan<- prometheus.Metric, e *hostfork.EnvRecord) {
	now := e.LimitsNow
	if now == nil {
		return
	}
	var groups limitGroups
	_ = json.Unmarshal(e.Limits, &groups)
	if v := now.Memory.Current; v != nil {
		gauge(ch, descMemory, float64(*v), e.ID)
	}
	if groups.Mechanisms["memory"] != "" {
		var sl envSpecLimits
		if json.Unmarshal(e.Spec, &sl) == nil {
			if n := specSize(sl.Limits.Memory); n > 0 {
				gauge(ch, descMemoryLimit, float64(n), e.ID)
			}
		}
	}
	if v := now.Memory.OOMKills; v != nil {
		total := *v
		if now.Memory.Source == "cgroup1" {
			total += removedV1Kills(e, groups)
		}
		ch <- prometheus.MustNewConstMetric(descOOMKills, prometheus.CounterValue, float64(total), e.ID)
	}
	if v := now.Pids.Current; v != nil {
		gauge(ch, descPids, float64(*v), e.ID)
	}
	if v := now.CPU.Usage; v != nil {
		ch <- prometheus.MustNewConstMetric(descCPU, prometheus.CounterValue, v.D().Seconds(), e.ID)
	}
}

// removedV1Kills keeps the OOM counter from going down on cgroup v1, where
// the kernel counts a kill only in the victim's own group and a finished
// command's group is removed with its count: each such command whose
// record says OOM counts as one kill (a lower bound). See the report of
// issue 12 for the library addition that would make this exact.
func removedV1Kills(e *hostfork.EnvRecord, g limitGroups) uint64 {
	dir := g.V1["memory"]
	if dir == "" {
		return 0
	}
	var n uint64
	for _, c := range e.Commands {
		if c.OOM == nil || !*c.OOM || !c.Final() {
			continue
		}
		if _, err := os.Stat(filepath.Join(dir, c.ID)); os.IsNotExist(err) {
			n++
		}
	}
	return n
}

// specSize reads a spec size as recorded: a string of bytes ("67108864")
// or a number.
func specSize(raw json.RawMessage) int64 {
	if len(raw) == 0 {
		return 0
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		n, _ := strconv.ParseInt(s, 10, 64)
		return n
	}
	var n int64
	_ = json.Unmarshal(raw, &n)
	return n
}
