package server

import (
	"reflect"

	"github.com/habemus-papadum/hostfork/api"
)

// enums are the closed vocabularies of package api: the OpenAPI document
// lists them as the types' enum, and the metrics give each counter a
// series per value from the start. TestEnumsComplete checks them against
// the constants of api's source.
var enums = map[reflect.Type][]string{
	reflect.TypeFor[api.EnvState](): strs(api.EnvCreating, api.EnvActive, api.EnvStopping, api.EnvStopped, api.EnvFailed),
	reflect.TypeFor[api.CommandState](): strs(api.CommandReserved, api.CommandRunning, api.CommandExited, api.CommandFailed,
		api.CommandUnverified),
	reflect.TypeFor[api.Phase]():    strs(api.PhasePending, api.PhaseLive, api.PhaseExited, api.PhaseUnverified, api.PhaseUnknown),
	reflect.TypeFor[api.Liveness](): strs(api.Alive, api.Exited, api.Unverified),
	reflect.TypeFor[api.StopReason](): strs(api.ReasonUser, api.ReasonDeadline, api.ReasonTimeout, api.ReasonIdle, api.ReasonOwnerExit,
		api.ReasonCancelled, api.ReasonCompleted, api.ReasonKeeperLost, api.ReasonReboot, api.ReasonAbandoned, api.ReasonLimit,
		api.ReasonUnknown),
	reflect.TypeFor[api.Tier]():       strs(api.TierSystemdScope, api.TierCgroup2, api.TierSubreaper),
	reflect.TypeFor[api.OutputMode](): strs(api.OutputFiles, api.OutputPipe, api.OutputInherit),
	reflect.TypeFor[api.EventKind](): strs(api.EventEnvCreated, api.EventEnvFailed, api.EventEnvStopDecided, api.EventEnvStopped, api.EventEnvDeadlineMoved,
		api.EventCommandStarted, api.EventCommandFailed, api.EventCommandLeaderExit, api.EventCommandTreeExit,
		api.EventCommandUnverified, api.EventCommandStopDecided, api.EventDeadline, api.EventIdle, api.EventOOM, api.EventReap,
		api.EventGC),
}

// emptyMeans are the enum types whose empty value is written and means
// something: the document lists "" among their values.
var emptyMeans = map[reflect.Type]string{
	reflect.TypeFor[api.StopReason](): "no stop was decided: the tree exited by itself, or has not yet",
}

func strs[T ~string](vs ...T) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}
