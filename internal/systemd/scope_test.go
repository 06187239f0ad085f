package systemd

import (
	"errors"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
)

func TestDeadlineProperties(t *testing.T) {
	for _, tc := range []struct {
		name            string
		d               Deadline
		runtime, stop   uint64
		wantErr         bool
		wantErrContains string
	}{
		{name: "grace is inside max runtime", d: Deadline{MaxRuntime: 3 * time.Second, Grace: time.Second}, runtime: 2_000_000, stop: 1_000_000},
		{name: "20 minutes with the default 2s grace", d: Deadline{MaxRuntime: 20 * time.Minute, Grace: 2 * time.Second}, runtime: 1_198_000_000, stop: 2_000_000},
		{name: "zero grace would mean no stop timeout", d: Deadline{MaxRuntime: time.Second}, wantErr: true},
		{name: "grace equal to max runtime leaves no runtime", d: Deadline{MaxRuntime: time.Second, Grace: time.Second}, wantErr: true},
		{name: "grace longer than max runtime", d: Deadline{MaxRuntime: time.Second, Grace: 2 * time.Second}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			props, err := tc.d.Properties()
			if tc.wantErr {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("want ErrInvalid, got %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]uint64{}
			for _, p := range props {
				got[p.Name] = p.Value.Value().(uint64)
			}
			if got["RuntimeMaxUSec"] != tc.runtime || got["TimeoutStopUSec"] != tc.stop || len(got) != 2 {
				t.Fatalf("got %v, want RuntimeMaxUSec=%d TimeoutStopUSec=%d", got, tc.runtime, tc.stop)
			}
		})
	}
}

func TestMajorVersion(t *testing.T) {
	for in, want := range map[string]int{
		"252.39-1~deb12u2": 252, "255.4-1ubuntu8": 255, "256": 256, "v257.1": 257, "": 0, "git": 0,
	} {
		if got := MajorVersion(in); got != want {
			t.Errorf("MajorVersion(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestCheckUnitName(t *testing.T) {
	for name, ok := range map[string]bool{
		"hostfork-abc.scope": true, `run-x\x2dy.scope`: true, "a:b_c.d-e@f.scope": true,
		".scope": false, "x.service": false, "has space.scope": false, "slash/x.scope": false,
	} {
		if err := CheckUnitName(name, ".scope"); (err == nil) != ok {
			t.Errorf("CheckUnitName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

func TestScopeMembership(t *testing.T) {
	for _, tc := range []struct {
		name       string
		m          Members
		allowPIDs  bool
		version    string
		membership string
		err        error
	}{
		{name: "pidfds on 255", m: Members{PIDFDs: []int{7}}, version: "255.4", membership: ByPIDFDs},
		{name: "pidfds preferred over pids", m: Members{PIDFDs: []int{7}, PIDs: []uint32{42}}, allowPIDs: true, version: "256", membership: ByPIDFDs},
		{name: "pidfds on 252 without permission", m: Members{PIDFDs: []int{7}, PIDs: []uint32{42}}, version: "252.39-1~deb12u2", err: ErrPIDFDsUnsupported},
		{name: "pidfds on 252 without pids to fall back to", m: Members{PIDFDs: []int{7}}, allowPIDs: true, version: "252", err: ErrPIDFDsUnsupported},
		{name: "explicit fallback on 252", m: Members{PIDFDs: []int{7}, PIDs: []uint32{42}}, allowPIDs: true, version: "252", membership: ByPIDs},
		{name: "pids only need permission", m: Members{PIDs: []uint32{42}}, version: "256", err: ErrInvalid},
		{name: "pids only with permission", m: Members{PIDs: []uint32{42}}, allowPIDs: true, version: "256", membership: ByPIDs},
		{name: "no processes", version: "256", err: ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			props, membership, fallback, err := scopeProperties(tc.m, ScopeOptions{AllowPIDs: tc.allowPIDs, Ref: true,
				Deadline: &Deadline{MaxRuntime: time.Minute, Grace: time.Second}}, tc.version)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("want %v, got %v", tc.err, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if membership != tc.membership {
				t.Fatalf("membership %q, want %q", membership, tc.membership)
			}
			if (membership == ByPIDs) != (fallback != "") {
				t.Fatalf("membership %s with fallback reason %q", membership, fallback)
			}
			got := map[string]dbus.Variant{}
			for _, p := range props {
				got[p.Name] = p.Value
			}
			for _, want := range []string{"Delegate", "CollectMode", "AddRef", "RuntimeMaxUSec", "TimeoutStopUSec", membership} {
				if _, ok := got[want]; !ok {
					t.Errorf("property %s missing from %v", want, got)
				}
			}
			if got["CollectMode"].Value() != "inactive-or-failed" || got["Delegate"].Value() != true {
				t.Errorf("CollectMode %v Delegate %v", got["CollectMode"], got["Delegate"])
			}
			if membership == ByPIDFDs {
				if _, ok := got["PIDs"]; ok {
					t.Errorf("PIDs sent beside PIDFDs")
				}
				if sig := got["PIDFDs"].Signature().String(); sig != "ah" {
					t.Errorf("PIDFDs signature %s, want ah", sig)
				}
			}
		})
	}
}

func TestEscapeAddress(t *testing.T) {
	if got := escapeAddress("/proc/12/root/run/dbus/system_bus_socket"); got != "/proc/12/root/run/dbus/system_bus_socket" {
		t.Errorf("got %s", got)
	}
	if got := escapeAddress("/tmp/a b,c=d;e"); got != "/tmp/a%20b%2cc%3dd%3be" {
		t.Errorf("got %s", got)
	}
}

func TestSocketBusNeedsAbsolutePath(t *testing.T) {
	if _, err := SocketBus("run/x").address(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("want ErrInvalid, got %v", err)
	}
}
