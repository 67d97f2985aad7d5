package testscripts

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
)

func init() {
	registerCmd("boundsobserve", cmdBoundsObserve)
	registerCmd("boundschannels", cmdBoundsChannels)
}

// boundsConnect starts a worker called name at url with the handlers given (no token, no
// reconnect): on a gated listener without an auth function, an Open session.
func boundsConnect(ts *testscript.TestScript, url, name string, fns map[string]protocol.Handler) *protocol.Worker {
	w := protocol.NewWorker(protocol.Config{URL: url, Name: name, Namespace: protocol.DefaultNamespace, NoReconnect: true, TokenFile: os.DevNull})
	for id, h := range fns {
		if err := w.Register(id, h); err != nil {
			ts.Fatalf("%s: register %s: %v", name, id, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		ts.Fatalf("%s: connect to %s: %v", name, url, err)
	}
	return w
}

// errCode is the protocol error code of err, or its text when it has none.
func errCode(err error) string {
	if e := protocol.AsError(err); e != nil && e.Code != "" {
		return e.Code
	}
	return err.Error()
}

// boundsobserve [-n N] SESSION_URL MAIN_URL FN: a session at SESSION_URL registers spy::seen and
// adds up to N observers of FN targeting it; a worker at MAIN_URL calls FN with
// {"who": "another"}, then the session calls it with {"who": "session"}. Prints
// "added K observers" (and ", then CODE" when one was refused), then, once the session's own
// call reached each of its observers (15 s deadline), "own call seen K times" and "another
// caller's call seen M times". The worker at MAIN_URL also observes FN (its audit::seen):
// "trusted observer saw 2 calls"; then "session lists K observers" and "trusted lists L
// observers", the rows of engine::observers::list each gets.
func cmdBoundsObserve(ts *testscript.TestScript, neg bool, args []string) {
	if neg {
		ts.Fatalf("boundsobserve does not take !")
	}
	fs := flag.NewFlagSet("boundsobserve", flag.ContinueOnError)
	n := fs.Int("n", 100, "")
	if err := fs.Parse(args); err != nil || fs.NArg() != 3 {
		ts.Fatalf("usage: boundsobserve [-n N] SESSION_URL MAIN_URL FN")
	}
	sessionURL, mainURL, fn := fs.Arg(0), fs.Arg(1), fs.Arg(2)
	var own, other atomic.Int64
	seen := func(_ context.Context, in json.RawMessage) (any, error) {
		switch {
		case strings.Contains(string(in), `"who":"session"`):
			own.Add(1)
		case strings.Contains(string(in), `"who":"another"`):
			other.Add(1)
		}
		return nil, nil
	}
	session := boundsConnect(ts, sessionURL, "bounds-session", map[string]protocol.Handler{"spy::seen": seen})
	defer session.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	added, refused := 0, ""
	for range *n {
		if _, err := session.Call(ctx, "engine::observers::add", map[string]any{"source": map[string]any{"function_id": fn}, "target": "spy::seen"}); err != nil {
			refused = errCode(err)
			break
		}
		added++
	}
	line := fmt.Sprintf("added %d observers", added)
	if refused != "" {
		line += ", then " + refused
	}
	fmt.Fprintln(ts.Stdout(), line)
	var audited atomic.Int64
	audit := func(context.Context, json.RawMessage) (any, error) { audited.Add(1); return nil, nil }
	caller := boundsConnect(ts, mainURL, "bounds-other", map[string]protocol.Handler{"audit::seen": audit})
	defer caller.Close()
	if _, err := caller.Call(ctx, "engine::observers::add", map[string]any{"source": map[string]any{"function_id": fn}, "target": "audit::seen"}); err != nil {
		ts.Fatalf("the trusted observer: %v", err)
	}
	if _, err := caller.Call(ctx, fn, map[string]string{"who": "another"}); err != nil {
		ts.Fatalf("the other caller's call of %s: %v", fn, err)
	}
	if _, err := session.Call(ctx, fn, map[string]string{"who": "session"}); err != nil {
		ts.Fatalf("the session's call of %s: %v", fn, err)
	}
	if !enginetest.Poll(15*time.Second, func() bool { return own.Load() >= int64(added) }) {
		ts.Fatalf("the session's own call reached %d of its %d observers within 15 s", own.Load(), added)
	}
	if !enginetest.Poll(15*time.Second, func() bool { return audited.Load() >= 2 }) {
		ts.Fatalf("the trusted observer saw %d of the 2 calls within 15 s", audited.Load())
	}
	fmt.Fprintf(ts.Stdout(), "own call seen %d times\nanother caller's call seen %d times\ntrusted observer saw %d calls\n", own.Load(), other.Load(), audited.Load())
	for _, l := range []struct {
		who string
		w   *protocol.Worker
	}{{"session", session}, {"trusted", caller}} {
		out, err := l.w.Call(ctx, "engine::observers::list", nil)
		if err != nil {
			ts.Fatalf("engine::observers::list from the %s: %v", l.who, err)
		}
		var list struct {
			Observers []json.RawMessage `json:"observers"`
		}
		_ = json.Unmarshal(out, &list)
		fmt.Fprintf(ts.Stdout(), "%s lists %d observers\n", l.who, len(list.Observers))
	}
}

// boundschannels SESSION_URL MAIN_URL K: K sessions at SESSION_URL, one after the other, each
// take stream channels (engine::channels::create_many, 256 at a time) until refused or 4096 in
// all; then a worker at MAIN_URL asks for 64, as the http worker refills its pool; then the
// sessions leave and a new session at SESSION_URL asks for one (polled for 5 s). Prints
// "session I: N channels[, then CODE: MESSAGE]" for each, "trusted: 64 channels" (or the
// refusal), and "after the sessions left: 1 channel" (or the refusal).
func cmdBoundsChannels(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 3 {
		ts.Fatalf("usage: boundschannels SESSION_URL MAIN_URL K")
	}
	sessionURL, mainURL := args[0], args[1]
	var k int
	if _, err := fmt.Sscan(args[2], &k); err != nil || k < 1 {
		ts.Fatalf("boundschannels: K must be a positive number")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	total := 0
	var sessions []*protocol.Worker
	defer func() {
		for _, s := range sessions {
			s.Close()
		}
	}()
	for i := 1; i <= k; i++ {
		s := boundsConnect(ts, sessionURL, fmt.Sprintf("bounds-hog-%d", i), nil)
		sessions = append(sessions, s)
		held, why := 0, ""
		for total < 4096 {
			pairs, err := s.CreateChannels(ctx, min(protocol.MaxChannelsPerCall, 4096-total))
			if err != nil {
				// Past a batch, ask for one at a time, so the count is the share to the channel.
				if one, err1 := s.CreateChannels(ctx, 1); err1 == nil {
					held, total = held+len(one), total+len(one)
					for {
						if one, err1 = s.CreateChannels(ctx, 1); err1 != nil {
							break
						}
						held, total = held+1, total+1
					}
					err = err1
				}
				e := protocol.AsError(err)
				why = ", then " + errCode(err)
				if e != nil {
					why += ": " + e.Message
				}
				break
			}
			held, total = held+len(pairs), total+len(pairs)
		}
		fmt.Fprintf(ts.Stdout(), "session %d: %d channels%s\n", i, held, why)
	}
	trusted := boundsConnect(ts, mainURL, "bounds-trusted", nil)
	defer trusted.Close()
	if pairs, err := trusted.CreateChannels(ctx, 64); err != nil {
		fmt.Fprintf(ts.Stdout(), "trusted: %s\n", errCode(err))
	} else {
		fmt.Fprintf(ts.Stdout(), "trusted: %d channels\n", len(pairs))
	}
	for _, s := range sessions {
		s.Close()
	}
	sessions = nil
	var last string
	ok := enginetest.Poll(5*time.Second, func() bool {
		s := boundsConnect(ts, sessionURL, "bounds-after", nil)
		defer s.Close()
		if _, err := s.CreateChannels(ctx, 1); err != nil {
			last = errCode(err)
			return false
		}
		return true
	})
	if ok {
		fmt.Fprintln(ts.Stdout(), "after the sessions left: 1 channel")
	} else {
		fmt.Fprintf(ts.Stdout(), "after the sessions left: %s\n", last)
	}
}
