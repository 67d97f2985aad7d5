package cluster

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// This engine awaits every answer to what it asks the other engines (a call, a channel
// question) on one subscription, made when it joins: each question's reply subject is the
// engine's inbox prefix and a token of its own, and the answer is handed to the question
// waiting on that token. A subscription per question would cost a SUB and an UNSUB at the
// server and a large receive buffer in the client on every call.

// waiter is one question awaiting its answer.
type waiter struct {
	nonce  string // the question's, which a good answer is signed as answering
	answer string // the kind a good answer is signed as
	ch     chan answered
	// done, instead of ch (requestAsync), takes the answer, or context.DeadlineExceeded past
	// the deadline, once, from whichever of deliver and timer removes the waiter.
	done  func(*nats.Msg, string, error)
	timer *time.Timer
}

// answered is what a waiter receives: the answer and the engine that signed it, or, with a
// nil msg, the server's word that nobody subscribes the question's subject.
type answered struct {
	msg    *nats.Msg
	engine string
}

// subscribeReplies makes the engine's one reply subscription.
func (c *Cluster) subscribeReplies() error {
	c.inbox = nats.NewInbox() + "."
	_, err := c.nc.Subscribe(c.inbox+"*", c.deliver)
	return err
}

// deliver hands an answer to the question it answers. An answer signed by no engine, or not as
// answering that question, is dropped (counted) and the question goes on waiting; so is one for
// a question that is no longer waiting. The signature is checked here, before the answer takes
// the question's one slot, so that forged answers cannot crowd out the good one.
func (c *Cluster) deliver(m *nats.Msg) {
	token := m.Subject[len(c.inbox):]
	c.waitMu.Lock()
	w := c.waiting[token]
	c.waitMu.Unlock()
	if w == nil {
		return // late: the question gave up waiting
	}
	var got answered
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" {
		got = answered{} // no responders
	} else {
		engine, _, ok := c.auth.verify(m, w.answer, w.nonce)
		if !ok {
			return
		}
		got = answered{msg: m, engine: engine}
	}
	if w.done != nil {
		if c.unwait(token, w) {
			w.timer.Stop()
			if got.msg == nil {
				w.done(nil, "", nats.ErrNoResponders)
			} else {
				w.done(got.msg, got.engine, nil)
			}
		}
		return
	}
	select {
	case w.ch <- got:
	default: // already answered
	}
}

// unwait removes w, awaiting token, and reports whether it was there still.
func (c *Cluster) unwait(token string, w *waiter) bool {
	c.waitMu.Lock()
	defer c.waitMu.Unlock()
	if c.waiting[token] != w {
		return false
	}
	delete(c.waiting, token)
	return true
}

// requestAsync is request without a goroutine waiting: done gets what request would return,
// once, from the goroutine that receives the answer, or context.DeadlineExceeded after
// timeout, or the error of sending m before requestAsync returns.
func (c *Cluster) requestAsync(m *nats.Msg, kind, answer string, timeout time.Duration, done func(*nats.Msg, string, error)) {
	token := strconv.FormatUint(c.tokens.Add(1), 36)
	m.Reply = c.inbox + token
	w := &waiter{nonce: c.auth.sign(m, kind, ""), answer: answer, done: done}
	c.waitMu.Lock()
	c.waiting[token] = w
	w.timer = time.AfterFunc(timeout, func() {
		if c.unwait(token, w) {
			done(nil, "", context.DeadlineExceeded)
		}
	})
	c.waitMu.Unlock()
	if err := c.nc.PublishMsg(m); err != nil && c.unwait(token, w) {
		w.timer.Stop()
		done(nil, "", err)
	}
}

// request sends m, signed as kind with a reply subject of its own, and waits for the first answer signed as answer
// that answers it (returned with the engine that signed it); answers that are not are dropped
// and the wait goes on. It fails nats.ErrNoResponders when the server says nobody subscribes
// m's subject, and ctx's error when ctx ends first.
func (c *Cluster) request(ctx context.Context, m *nats.Msg, kind, answer string) (*nats.Msg, string, error) {
	token := strconv.FormatUint(c.tokens.Add(1), 36)
	m.Reply = c.inbox + token
	w := &waiter{nonce: c.auth.sign(m, kind, ""), answer: answer, ch: make(chan answered, 1)}
	c.waitMu.Lock()
	c.waiting[token] = w
	c.waitMu.Unlock()
	defer func() {
		c.waitMu.Lock()
		delete(c.waiting, token)
		c.waitMu.Unlock()
	}()
	if err := c.nc.PublishMsg(m); err != nil {
		return nil, "", err
	}
	select {
	case a := <-w.ch:
		if a.msg == nil {
			return nil, "", nats.ErrNoResponders
		}
		return a.msg, a.engine, nil
	case <-ctx.Done():
		return nil, "", ctx.Err()
	}
}

// CodecCost is what one call of k with data costs in this package's own work, measured over n
// rounds for benchmarks: call is the calling engine's encoding and signing plus the serving
// engine's check and decoding of the call; reply the same for its answer. It is the part of a
// remote call that is neither NATS nor the engines' workers.
func CodecCost(k Key, data json.RawMessage, n int) (call, reply time.Duration) {
	a := newSigner(make([]byte, MinKeyBytes), "a", slog.New(slog.DiscardHandler))
	b := newSigner(make([]byte, MinKeyBytes), "b", slog.New(slog.DiscardHandler))
	r := Request{Data: data, TimeoutMS: 30000, Caller: Caller{WorkerID: "0d6f8c1e-5d2d-436f-b9f0-6b13ea6c108c", Name: "bench", Namespace: "default", Engine: "a"}}
	start := time.Now()
	nonces := make([]string, n)
	for i := range n {
		m, _ := encodeCall(k, r)
		m.Reply = "_INBOX.bench." + strconv.Itoa(i)
		a.sign(m, kindCall, "")
		_, nonce, ok := b.verify(m, kindCall, "")
		if _, err := decodeCall(m); err != nil || !ok {
			panic("cluster: CodecCost's call does not decode")
		}
		nonces[i] = nonce
	}
	call = time.Since(start) / time.Duration(n)
	start = time.Now()
	for i := range n {
		m := encodeReply("_INBOX.bench."+strconv.Itoa(i), data, nil)
		b.sign(m, kindReply, nonces[i])
		_, _, ok := a.verify(m, kindReply, nonces[i])
		if _, _, err := decodeReply(m); err != nil || !ok {
			panic("cluster: CodecCost's reply does not decode")
		}
	}
	return call, time.Since(start) / time.Duration(n)
}
