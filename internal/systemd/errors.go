package systemd

import (
	"errors"

	"github.com/godbus/dbus/v5"
)

var (
	// ErrInvalid reports a request this package refuses before sending it:
	// a bad unit name, a deadline that can't be expressed, no processes.
	ErrInvalid = errors.New("invalid systemd request")
	// ErrPIDFDsUnsupported reports a manager that can't take PIDFDs when a
	// scope is created (systemd before 255) while the caller did not allow
	// numeric PIDs.
	ErrPIDFDsUnsupported = errors.New("the systemd manager does not accept PIDFDs at scope creation")
	// ErrDisconnected reports that the connection to the bus broke during
	// a call; the next call reconnects.
	ErrDisconnected = errors.New("the D-Bus connection to the systemd manager broke")
	// ErrJobFailed reports a start or stop job whose result was not "done".
	ErrJobFailed = errors.New("systemd job did not complete")
	// ErrNotActive reports a scope that the manager did not hold active
	// (with a cgroup and the requested deadline) right after its creation.
	ErrNotActive = errors.New("the scope is not active as requested")
	// ErrUnitExists reports a unit name that is already taken.
	ErrUnitExists = errors.New("a unit with this name already exists")
	// ErrNoSuchUnit reports a unit the manager does not know.
	ErrNoSuchUnit = errors.New("no such unit")
	// ErrNoBus reports that no address for the requested bus is known.
	ErrNoBus = errors.New("no D-Bus address for the systemd manager")
	// ErrReadOnly reports a property the manager can't change on a
	// running unit (systemd 252 and a scope's RuntimeMaxUSec).
	ErrReadOnly = errors.New("the systemd manager can't change this property of a running unit")
	// ErrClosed reports a call on a closed Conn.
	ErrClosed = errors.New("systemd connection closed")
)

// D-Bus error names the manager answers with; these are API, not messages.
const (
	dbusUnitExists = "org.freedesktop.systemd1.UnitExists"
	dbusNoSuchUnit = "org.freedesktop.systemd1.NoSuchUnit"
	dbusReadOnly   = "org.freedesktop.DBus.Error.PropertyReadOnly"
)

// classify adds this package's sentinel to a D-Bus error the manager
// answered with, keeping the original error (and its message) wrapped.
func classify(err error) error {
	var de dbus.Error
	if !errors.As(err, &de) {
		var dp *dbus.Error
		if !errors.As(err, &dp) || dp == nil {
			return err
		}
		de = *dp
	}
	switch de.Name {
	case dbusUnitExists:
		return errors.Join(ErrUnitExists, err)
	case dbusNoSuchUnit:
		return errors.Join(ErrNoSuchUnit, err)
	case dbusReadOnly:
		return errors.Join(ErrReadOnly, err)
	}
	return err
}
