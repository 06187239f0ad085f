package supervise

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"

	"github.com/habemus-papadum/hostfork/internal/linux"
)

// RootlessView reports whether this process makes views through a user
// namespace (decision 125): without root, the keeper first makes a user
// namespace of its own, in which it may mount, and the guardians join it
// with the view's mount namespace.
func RootlessView() bool { return os.Geteuid() != 0 }

// SubIDTools are the setuid helpers that map subordinate ids into a user
// namespace (Debian's uidmap package).
var SubIDTools = [2]string{"newuidmap", "newgidmap"}

// IDMaps is how a rootless keeper's ids are mapped: the caller's uid and
// gid are themselves inside, plus the subordinate ranges of /etc/subuid
// and /etc/subgid where newuidmap and newgidmap exist to write them
// (linux.IdentityMap). Tool is the helper's path ("": the launcher writes
// the one-id map itself, and setgroups is denied first, as the kernel
// requires of an unprivileged writer).
type IDMaps struct {
	UID, GID         []linux.IDMapLine
	UIDTool, GIDTool string
}

// PlanIDMaps works out the maps for this process's user.
func PlanIDMaps() IDMaps {
	uid, gid := os.Geteuid(), os.Getegid()
	name := ""
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		name = u.Username
	}
	m := IDMaps{UID: linux.IdentityMap(uid, nil), GID: linux.IdentityMap(gid, nil)}
	if p, err := exec.LookPath(SubIDTools[0]); err == nil {
		if r, _ := linux.SubIDs("/etc/subuid", name, uid); len(r) > 0 {
			m.UID, m.UIDTool = linux.IdentityMap(uid, r), p
		}
	}
	if p, err := exec.LookPath(SubIDTools[1]); err == nil {
		if r, _ := linux.SubIDs("/etc/subgid", name, uid); len(r) > 0 {
			m.GID, m.GIDTool = linux.IdentityMap(gid, r), p
		}
	}
	return m
}

// Describe says in a phrase what the maps cover.
func (m IDMaps) Describe() string {
	count := func(l []linux.IDMapLine) int {
		n := 0
		for _, x := range l {
			n += x.Count
		}
		return n
	}
	s := fmt.Sprintf("uid %d and gid %d map to themselves", os.Geteuid(), os.Getegid())
	if m.UIDTool != "" || m.GIDTool != "" {
		s += fmt.Sprintf(", with %d subordinate uids and %d subordinate gids (newuidmap/newgidmap)", count(m.UID)-1, count(m.GID)-1)
	} else {
		s += ", no other ids (no subordinate ids in /etc/subuid and /etc/subgid, or no newuidmap/newgidmap: apt-get install uidmap)"
	}
	return s
}

// mapIDs writes the id maps of the user namespace process pid has just
// made (it waits for them).
func mapIDs(pid int) error {
	m := PlanIDMaps()
	proc := "/proc/" + strconv.Itoa(pid) + "/"
	if err := writeMap(m.UIDTool, pid, proc+"uid_map", m.UID); err != nil {
		return err
	}
	if m.GIDTool == "" {
		if err := os.WriteFile(proc+"setgroups", []byte("deny"), 0); err != nil {
			return err
		}
	}
	return writeMap(m.GIDTool, pid, proc+"gid_map", m.GID)
}

func writeMap(tool string, pid int, file string, lines []linux.IDMapLine) error {
	if tool == "" {
		var b bytes.Buffer
		for _, l := range lines {
			fmt.Fprintf(&b, "%d %d %d\n", l.Inside, l.Outside, l.Count)
		}
		return os.WriteFile(file, b.Bytes(), 0)
	}
	args := []string{strconv.Itoa(pid)}
	for _, l := range lines {
		args = append(args, strconv.Itoa(l.Inside), strconv.Itoa(l.Outside), strconv.Itoa(l.Count))
	}
	cmd := exec.Command(tool, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", tool, err, strings.TrimSpace(string(out)))
	}
	return nil
}
