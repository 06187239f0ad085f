package linux

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// UsernsSysctl is one kernel setting that can forbid unprivileged user
// namespaces, as read now.
type UsernsSysctl struct {
	Name   string // e.g. "user.max_user_namespaces"
	Value  int
	Remedy string // the command that allows them
}

// UsernsBlocked returns the settings that forbid a non-root user to make a
// user namespace here (none: allowed, as far as settings say; an LSM
// policy can still refuse): user.max_user_namespaces = 0,
// kernel.unprivileged_userns_clone = 0 (Debian and Ubuntu kernels before
// 6.x; absent elsewhere), kernel.apparmor_restrict_unprivileged_userns = 1
// (Ubuntu 23.10 and later).
func UsernsBlocked() []UsernsSysctl {
	var out []UsernsSysctl
	read := func(path string) (int, bool) {
		b, err := os.ReadFile(path)
		if err != nil {
			return 0, false
		}
		v, err := strconv.Atoi(strings.TrimSpace(string(b)))
		return v, err == nil
	}
	if v, ok := read("/proc/sys/user/max_user_namespaces"); ok && v == 0 {
		out = append(out, UsernsSysctl{"user.max_user_namespaces", v, "sysctl -w user.max_user_namespaces=15000"})
	}
	if v, ok := read("/proc/sys/kernel/unprivileged_userns_clone"); ok && v == 0 {
		out = append(out, UsernsSysctl{"kernel.unprivileged_userns_clone", v, "sysctl -w kernel.unprivileged_userns_clone=1"})
	}
	if v, ok := read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); ok && v == 1 {
		out = append(out, UsernsSysctl{"kernel.apparmor_restrict_unprivileged_userns", v, "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0, or an AppArmor profile for hostfork with the 'userns,' rule"})
	}
	return out
}

// UsernsBlockedReason says in one sentence why unprivileged user
// namespaces are off and how to allow them; "" when no setting forbids
// them.
func UsernsBlockedReason() string {
	b := UsernsBlocked()
	if len(b) == 0 {
		return ""
	}
	var what, fix []string
	for _, s := range b {
		what = append(what, fmt.Sprintf("%s is %d", s.Name, s.Value))
		fix = append(fix, s.Remedy)
	}
	return "unprivileged user namespaces are off (" + strings.Join(what, ", ") + "); as root: " + strings.Join(fix, "; ")
}

// IDRange is a range of ids: Count ids from Start.
type IDRange struct {
	Start, Count int
}

// SubIDs reads the subordinate id ranges of a user from an /etc/subuid or
// /etc/subgid style file (lines "NAME-OR-ID:START:COUNT"). A missing file
// gives none.
func SubIDs(path, name string, id int) ([]IDRange, error) {
	f, err := os.Open(path)
	if err != nil {
		if os.IsNotExist(err) {
			return nil, nil
		}
		return nil, err
	}
	defer f.Close()
	var out []IDRange
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if r, ok := parseSubID(sc.Text(), name, id); ok {
			out = append(out, r)
		}
	}
	return out, sc.Err()
}

func parseSubID(line, name string, id int) (IDRange, bool) {
	f := strings.Split(strings.TrimSpace(line), ":")
	if len(f) != 3 || f[0] == "" || (f[0] != name && f[0] != strconv.Itoa(id)) {
		return IDRange{}, false
	}
	start, err1 := strconv.Atoi(f[1])
	count, err2 := strconv.Atoi(f[2])
	if err1 != nil || err2 != nil || start < 0 || count <= 0 {
		return IDRange{}, false
	}
	return IDRange{start, count}, true
}

// IDMapLine is one line of a uid_map or gid_map: Count ids from Inside in
// the namespace are Outside… in its parent.
type IDMapLine struct {
	Inside, Outside, Count int
}

// IdentityMap is the id map of a rootless view: own (the caller's id) is
// itself inside, so commands see their own uid and the files they make
// are theirs on the host; the subordinate ranges fill the ids from 0
// upwards around it, so ids other than own that processes inside set on
// files land on the user's subordinate ids, never on another user's.
// Without subordinate ranges it is own alone.
func IdentityMap(own int, sub []IDRange) []IDMapLine {
	out := []IDMapLine{{own, own, 1}}
	next := 0 // the next free id inside
	for _, r := range sub {
		for start, count := r.Start, r.Count; count > 0; {
			if next == own {
				next++
			}
			n := count
			if next < own && next+n > own {
				n = own - next
			}
			out = append(out, IDMapLine{next, start, n})
			next += n
			start += n
			count -= n
		}
	}
	return out
}

// KernelAtLeast reports whether the running kernel's release is at least
// major.minor (false when it can't be read).
func KernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	return ReleaseAtLeast(unix.ByteSliceToString(u.Release[:]), major, minor)
}

// ReleaseAtLeast reports whether a kernel release ("6.1.0-13-amd64",
// "5.14-rc1") is at least major.minor.
func ReleaseAtLeast(release string, major, minor int) bool {
	var ma, mi int
	if _, err := fmt.Sscanf(release, "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || (ma == major && mi >= minor)
}
