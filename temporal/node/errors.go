package node

import (
	"context"
	"errors"

	"go.temporal.io/sdk/temporal"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/temporal/flow"
)

// appError maps a hostfork error to the Temporal application error type the
// workflow decides on (flow.Err*): a request that can't succeed is not
// retried; everything else is.
func appError(err error) error {
	var ae *temporal.ApplicationError
	var ce *temporal.CanceledError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ae), errors.As(err, &ce), errors.Is(err, context.Canceled):
		return err
	case errors.Is(err, hostfork.ErrInvalid), errors.Is(err, hostfork.ErrUnsupported),
		errors.Is(err, hostfork.ErrExecutableNotFound), errors.Is(err, hostfork.ErrNotExecutable),
		errors.Is(err, hostfork.ErrForbidden), errors.Is(err, hostfork.ErrAmbiguous):
		return temporal.NewNonRetryableApplicationError(err.Error(), flow.ErrInvalid, nil)
	case errors.Is(err, hostfork.ErrNotFound):
		return temporal.NewNonRetryableApplicationError(err.Error(), flow.ErrNotFound, nil)
	case errors.Is(err, hostfork.ErrEnvNotActive):
		return temporal.NewNonRetryableApplicationError(err.Error(), flow.ErrEnvLost, nil)
	case errors.Is(err, hostfork.ErrExists):
		return temporal.NewNonRetryableApplicationError(err.Error(), flow.ErrExists, nil)
	}
	return temporal.NewApplicationError(err.Error(), flow.ErrHostfork)
}

func invalid(msg string) error {
	return temporal.NewNonRetryableApplicationError(msg, flow.ErrInvalid, nil)
}

func envLost(msg string) error {
	return temporal.NewNonRetryableApplicationError(msg, flow.ErrEnvLost, nil)
}
