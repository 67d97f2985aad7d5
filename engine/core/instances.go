package core

import (
	"crypto/subtle"
	"math/rand/v2"

	"github.com/iii-go/iii/engine/internal/wire"
	"github.com/iii-go/iii/engine/protocol"
)

// Several live workers may serve one function id in one namespace: a rolling deploy
// starts the new worker before it stops the old one, and a pool of workers shares the calls.
// e.funcs holds the function's first live instance, which is what engine::functions::list and
// the trigger views show; the others wait in its more list and take its place when it leaves,
// so the function stays listed while one instance lives. Each call goes to the instance with
// the fewest calls in flight, ties at random; a trigger fires a call, so it reaches one instance.

// sameRights reports whether connection c, registering m, may serve f's function beside the
// workers that serve it now: the same listener, neither on a session of a gated one (each
// session's rights are its own), the same token (none for both counts, in a namespace that asks
// for none), the same protection, and neither an HTTP-invoked function. Anything else is the
// conflict it always was.
func sameRights(f *fnEntry, c *conn, m *protocol.Message) bool {
	if f.http != nil || wire.HasInvocation(m) || f.frame.Protected != m.Protected {
		return false
	}
	if f.conn.l != c.l || f.conn.session != nil || c.session != nil {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(f.conn.token), []byte(c.token)) == 1
}

// addInstance records c as one more instance of f's function, or refreshes the registration
// of an instance c already is. Call with e.mu held.
func (f *fnEntry) addInstance(c *conn, m *protocol.Message) {
	for _, o := range f.more {
		if o.conn == c {
			o.frame = m
			return
		}
	}
	f.more = append(f.more, &fnEntry{conn: c, frame: m})
}

// removeInstance forgets c's instance of function k: the first of the others takes the
// function's place, or the function goes with its last instance; it reports whether the
// function went. Call with e.mu held.
func (e *Engine) removeInstance(k fkey, c *conn) (gone bool) {
	f := e.funcs[k]
	if f == nil {
		return false
	}
	if f.conn == c {
		if len(f.more) == 0 {
			delete(e.funcs, k)
			return true
		}
		next := f.more[0]
		next.more = f.more[1:]
		e.funcs[k] = next
		return false
	}
	for i, o := range f.more {
		if o.conn == c {
			f.more = append(f.more[:i:i], f.more[i+1:]...)
			return false
		}
	}
	return false
}

// pick is the instance a call goes to: the one with the fewest calls in flight, ties at
// random; f itself when it is the only one, nil for no function. Call with e.mu held (read).
func (f *fnEntry) pick() *fnEntry {
	if f == nil || len(f.more) == 0 {
		return f
	}
	best, ties := f, 1
	low := f.conn.serving.Load()
	for _, o := range f.more {
		switch n := o.conn.serving.Load(); {
		case n < low:
			best, low, ties = o, n, 1
		case n == low:
			ties++
			if rand.IntN(ties) == 0 {
				best = o
			}
		}
	}
	return best
}

// instances calls fn for every instance of f, f first.
func (f *fnEntry) instances(fn func(*fnEntry)) {
	fn(f)
	for _, o := range f.more {
		fn(o)
	}
}
