package node

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.temporal.io/sdk/worker"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/temporal/flow"
)

// admissionSlots is the activity slot supplier of the shared queue: the
// node polls for a Create only while hostfork's admission has a slot for
// it, so a paused or full node takes no new environments and the server
// hands them to another node. It keeps no reservations of its own: each
// decision is computed from the store (Host.Paused, Host.Capacity, the
// environments this worker made) and the SDK's count of the slots it has
// issued and not yet released.
type admissionSlots struct {
	h    *hostfork.Host
	poll time.Duration
	log  *slog.Logger

	mu   sync.Mutex // one decision at a time
	last string     // the last refusal, logged when it changes
}

var _ worker.SlotSupplier = (*admissionSlots)(nil)

// slotDecision decides whether the shared queue may take one more task.
// free is hostfork's free admission slots (live agent workloads already
// counted), waiting the environments this worker made that hold no live
// agent workload (between Create and their first command, or between
// commands), issued the SDK's slots in use or reserved for a poll. full
// says the node itself has no room (paused, or no slot even before the
// pollers'), as opposed to its free slots being taken by pollers.
func slotDecision(paused bool, free, waiting, issued int) (ok bool, why string, full bool) {
	switch {
	case paused:
		return false, "admission is paused (hostfork pause)", true
	case free-waiting <= 0:
		return false, fmt.Sprintf("node full: %d free slots in hostfork's admission, %d held by environments waiting for a command", free, waiting), true
	case free-waiting-issued <= 0:
		return false, fmt.Sprintf("the %d free slots are issued to pollers or tasks", free-waiting), false
	}
	return true, "", false
}

// check gathers the facts and decides.
func (s *admissionSlots) check(ctx context.Context, issued int) (ok bool, why string, full bool) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	paused, err := s.h.Paused(ctx)
	if err != nil {
		return false, "reading the pause gate: " + err.Error(), true
	}
	if paused {
		return slotDecision(true, 0, 0, issued)
	}
	rep, err := s.h.Capacity(ctx)
	if err != nil {
		return false, "sampling capacity: " + err.Error(), true
	}
	envs, err := s.h.Envs(ctx, hostfork.EnvFilter{Labels: hostfork.Selector{flow.LabelCreate}, Active: true, WithCommands: true})
	if err != nil {
		return false, "listing environments: " + err.Error(), true
	}
	waiting := 0
	for _, e := range envs {
		if !slices.ContainsFunc(e.Commands, func(c hostfork.CommandRecord) bool {
			return c.WorkloadKind == hostfork.WorkloadAgent && c.Liveness != hostfork.Exited
		}) {
			waiting++
		}
	}
	return slotDecision(false, rep.Free, waiting, issued)
}

func (s *admissionSlots) try(ctx context.Context, info worker.SlotReservationInfo) *worker.SlotPermit {
	s.mu.Lock()
	defer s.mu.Unlock()
	ok, why, full := s.check(ctx, info.NumIssuedSlots())
	if !ok {
		// A poller waiting while the others hold the free slots is
		// normal; only a paused or full node is news.
		if full && why != s.last {
			s.log.Info("not taking placement tasks", "reason", why)
			s.last = why
		}
		return nil
	}
	if s.last != "" {
		s.log.Info("taking placement tasks again")
		s.last = ""
	}
	return &worker.SlotPermit{}
}

// ReserveSlot blocks until admission has a slot, checking every poll.
func (s *admissionSlots) ReserveSlot(ctx context.Context, info worker.SlotReservationInfo) (*worker.SlotPermit, error) {
	for {
		if p := s.try(ctx, info); p != nil {
			return p, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(s.poll):
		}
	}
}

// TryReserveSlot is ReserveSlot without waiting.
func (s *admissionSlots) TryReserveSlot(info worker.SlotReservationInfo) *worker.SlotPermit {
	return s.try(context.Background(), info)
}

// MarkSlotUsed and ReleaseSlot keep nothing: the SDK counts issued slots.
func (s *admissionSlots) MarkSlotUsed(worker.SlotMarkUsedInfo) {}
func (s *admissionSlots) ReleaseSlot(worker.SlotReleaseInfo)   {}

// MaxSlots is 0: the limit is the host's, not a number.
func (s *admissionSlots) MaxSlots() int { return 0 }
