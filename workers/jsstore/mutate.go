package jsstore

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrTooManyWriters is the cause of a Mutate that lost every compare-and-set to other writers.
var ErrTooManyWriters = errors.New("too many concurrent writers; try again")

// MutateError is a store failure of Mutate: Op is "reading" or "writing".
type MutateError struct {
	Op  string
	Err error
}

func (e *MutateError) Error() string { return e.Op + ": " + e.Err.Error() }
func (e *MutateError) Unwrap() error { return e.Err }

// Mutate runs change on the value of key in kv (nil when absent) and commits what it returns
// (nil deletes) with a compare-and-set on the revision it read, trying again, up to 50 times,
// when another writer got there first. An error of change is returned as it is; a store failure
// is a *MutateError. Both old and nw are nil when the key was absent and stays so.
func Mutate(ctx context.Context, kv jetstream.KeyValue, key string, change func(old []byte) ([]byte, error)) (old, nw []byte, err error) {
	for range 50 {
		var rev uint64
		old = nil
		e, gerr := kv.Get(ctx, key)
		switch {
		case gerr == nil:
			rev, old = e.Revision(), e.Value()
		case errors.Is(gerr, jetstream.ErrKeyNotFound):
		default:
			return nil, nil, &MutateError{"reading", gerr}
		}
		if nw, err = change(old); err != nil {
			return nil, nil, err
		}
		switch {
		case nw == nil && old == nil:
			return nil, nil, nil
		case nw == nil:
			err = kv.Delete(ctx, key, jetstream.LastRevision(rev))
		case old == nil:
			_, err = kv.Create(ctx, key, nw)
		default:
			_, err = kv.Update(ctx, key, nw, rev)
		}
		if err == nil {
			return old, nw, nil
		}
		if !isConflict(err) {
			return nil, nil, &MutateError{"writing", err}
		}
	}
	return nil, nil, &MutateError{"writing", ErrTooManyWriters}
}

// isConflict reports whether a write lost a compare-and-set.
func isConflict(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
		return true
	}
	return errors.Is(err, jetstream.ErrKeyExists)
}
