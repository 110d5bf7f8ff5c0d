package resilience

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrDeadline is wrapped by Retry's error when the next wait would pass
// the context's deadline, so it stopped instead of sleeping.
var ErrDeadline = errors.New("next retry would pass the deadline")

// FailureError attaches a verdict to an operation's error, so Retry knows
// whether and when to try again.
type FailureError struct {
	Verdict Verdict
	Err     error
}

func (e *FailureError) Error() string {
	if e.Err == nil {
		return "upstream failure (" + string(e.Verdict.Class) + ")"
	}
	return e.Err.Error()
}

func (e *FailureError) Unwrap() error { return e.Err }

// WithVerdict wraps err with its verdict. A nil err stays nil.
func WithVerdict(err error, v Verdict) error {
	if err == nil {
		return nil
	}
	return &FailureError{Verdict: v, Err: err}
}

// verdictOf reads the verdict an operation's error carries. Cancellation
// is the caller's own doing; any other error without a verdict is taken
// as a transient transport failure.
func verdictOf(err error) Verdict {
	var fe *FailureError
	switch {
	case errors.As(err, &fe):
		return fe.Verdict
	case errors.Is(err, context.Canceled):
		return transportEffects[TransportCanceled].verdict()
	case errors.Is(err, context.DeadlineExceeded):
		return effTimeout.verdict()
	}
	return effTransport.verdict()
}

// Retry runs op, and runs it again while the policy says so. It owns the
// timer and watches ctx: it returns nil on success; the last error when
// the policy stops (no retry allowed, budget spent, hint too long); an
// error wrapping ErrDeadline and the last error when the next wait would
// pass ctx's deadline; an error wrapping ctx.Err() and the last error
// when ctx ends during a wait. op receives ctx and should wrap its errors
// with WithVerdict.
func Retry(ctx context.Context, p *Policy, op func(ctx context.Context) error) error {
	deadline, _ := ctx.Deadline()
	for retries := 0; ; retries++ {
		err := op(ctx)
		if err == nil {
			return nil
		}
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("%w (last error: %w)", ctxErr, err)
		}
		step, deadlineStop := p.plan(verdictOf(err), Attempt{Retries: retries, Now: time.Now(), Deadline: deadline})
		switch {
		case deadlineStop:
			return fmt.Errorf("%w: %w", ErrDeadline, err)
		case step.Action != ActionRetry:
			return err
		}
		if ctxErr := sleep(ctx, step.Delay); ctxErr != nil {
			return fmt.Errorf("%w (last error: %w)", ctxErr, err)
		}
	}
}

// sleep waits d or until ctx ends, whichever is first.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
