package protocol

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/iii-go/iii/engine/internal/batchconn"
	"github.com/iii-go/iii/engine/internal/wire"
	"github.com/iii-go/iii/internal/base/backoff"
	"github.com/iii-go/iii/internal/base/errcode"
)

// Start connects and registers. It returns once the engine has accepted the worker and every
// function registered so far; without NoReconnect it retries until ctx ends.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("worker already started")
	}
	w.started = true
	w.mu.Unlock()
	for n := 1; ; n++ {
		err := w.connect(ctx)
		if err == nil {
			return nil
		}
		if w.cfg.NoReconnect || isRefusal(err) {
			w.stop(err)
			return err
		}
		w.cfg.Logger.Warn("connecting to the engine", "url", w.cfg.URL, "err", err)
		select {
		case <-ctx.Done():
			w.stop(ctx.Err())
			return fmt.Errorf("connecting to %s: %w", w.cfg.URL, err)
		case <-w.ctx.Done():
			return errors.New("worker closed")
		case <-time.After(reconnect.Jitter(n)):
		}
	}
}

// reconnect is the SDK's schedule for connecting again: up to 100ms, doubling to 5s, each wait
// drawn at random below that (full jitter), so the workers of a restarted engine spread out.
var reconnect = backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}

func isRefusal(err error) bool {
	var e *Error
	return errors.As(err, &e) && (e.Code == errcode.TokenRequired || e.Code == errcode.TokenInvalid || e.Code == errcode.Forbidden)
}

// dialHeader carries the project token (read fresh from its file, else Config.Token) as a
// bearer header.
func (w *Worker) dialHeader() (http.Header, error) {
	h := http.Header{}
	token := strings.TrimSpace(w.cfg.Token)
	if w.cfg.TokenFile != "" {
		b, err := os.ReadFile(w.cfg.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("reading the project token file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	return h, nil
}

// connect dials, sends registrations and engine::workers::register, and waits for its reply.
func (w *Worker) connect(ctx context.Context) error {
	header, err := w.dialHeader()
	if err != nil {
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := dialLink(dctx, w.cfg.URL, header)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.conn = c
	frames := w.trig.typeFrames()
	for _, f := range w.funcs {
		frames = append(frames, f.frame)
	}
	frames = append(frames, w.trig.triggerFrames()...)
	w.mu.Unlock()
	go w.readLoop(c)
	for _, m := range frames {
		if err := w.write(c, m); err != nil {
			c.close()
			return err
		}
	}
	reg := map[string]any{
		"runtime": "go", "version": w.cfg.Version, "name": w.cfg.Name, "description": w.cfg.Description,
		"os": runtime.GOOS, "pid": os.Getpid(), "namespace": w.cfg.Namespace,
	}
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	if _, err := w.callOn(rctx, c, FnRegisterWorker, reg, callOpts{}, 10*time.Second); err != nil {
		_ = c.ws.CloseStatus(batchconn.StatusNormalClosure, "registration failed", time.Second)
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conn != c {
		return errors.New("connection lost during registration")
	}
	close(w.up)
	w.everUp = true
	go w.keepalive(c)
	return nil
}

// PingInterval is how often the SDK pings the engine; a ping unanswered for as long drops the
// connection, which then reconnects.
const PingInterval = 20 * time.Second

func (w *Worker) keepalive(c *link) {
	t := time.NewTicker(PingInterval)
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		current := w.conn == c
		w.mu.Unlock()
		if !current {
			return
		}
		err := c.ws.Ping(PingInterval)
		if err != nil && w.ctx.Err() == nil {
			w.cfg.Logger.Warn("engine did not answer a ping; reconnecting", "err", err)
			c.close()
			return
		}
	}
}

// reuseReadBuf is the largest read buffer readLoop keeps for the next frame.
const reuseReadBuf = 64 << 10

// readMessage reads one message into buf's memory, growing it as needed. Decode never keeps a
// reference into its input, so the buffer serves the next message too.
func readMessage(ws *batchconn.Conn, buf []byte) ([]byte, error) {
	_, b, err := ws.ReadMessage(buf, nil)
	return b, err
}

// readLoop dispatches frames of one connection until it fails, then reconnects unless stopped.
func (w *Worker) readLoop(c *link) {
	// Reads take no context (a cancellable one costs a registration per frame); closing the
	// worker closes the socket instead, which ends the read.
	stop := context.AfterFunc(w.ctx, c.close)
	defer stop()
	var buf []byte
	for {
		b, err := readMessage(c.ws, buf)
		if err != nil {
			break
		}
		if buf = b; cap(b) > reuseReadBuf {
			buf = nil
		}
		m, err := wire.Decode(b)
		if err != nil {
			w.cfg.Logger.Debug("ignoring frame", "err", err)
			continue
		}
		switch m.Type {
		case TypeInvocationResult:
			if !w.pending.settle(m.InvocationID, m) {
				wire.Recycle(m)
			}
		case TypeInvokeFunction:
			go w.serve(c, m)
		case TypeWorkerRegistered:
			w.mu.Lock()
			w.workerID = m.WorkerID
			w.mu.Unlock()
		case TypePing:
			_ = w.write(c, &Message{Type: TypePong})
		case TypeRegistrationRejected:
			w.cfg.Logger.Warn("registration rejected", "code", m.Code, "function", m.FunctionID, "namespace", m.NamespaceOr(""))
		case TypeRegisterTrigger, TypeUnregisterTrigger, TypeTriggerRegistrationResult:
			w.onTriggerFrame(c, m)
		}
	}
	w.mu.Lock()
	if w.conn == c {
		w.conn = nil
		select {
		case <-w.up:
			w.up = make(chan struct{})
		default:
		}
	}
	registered := w.err == nil && w.everUp
	w.mu.Unlock()
	c.close() // first: a call that registers after the sweep below fails on its write
	w.pending.settleAll()
	if w.ctx.Err() != nil || w.cfg.NoReconnect {
		if w.cfg.NoReconnect {
			w.stop(errors.New("connection to the engine closed"))
		}
		return
	}
	if registered {
		go w.reconnect()
	}
}

// reconnect retries until connected again, the worker closes, or registration is refused. Only
// one reconnect loop runs at a time; a connection lost while it finishes is picked up again.
func (w *Worker) reconnect() {
	for {
		if !w.reconnecting.CompareAndSwap(false, true) {
			return
		}
		w.reconnectLoop()
		w.reconnecting.Store(false)
		select {
		case <-w.done:
			return
		default:
		}
		if w.ctx.Err() != nil || w.liveConn() != nil {
			return
		}
	}
}

func (w *Worker) reconnectLoop() {
	for n := 1; ; {
		select {
		case <-w.ctx.Done():
			return
		case <-time.After(reconnect.Jitter(n)):
		}
		if w.liveConn() != nil {
			return
		}
		err := w.connect(w.ctx)
		if err == nil {
			w.cfg.Logger.Info("reconnected to the engine", "url", w.cfg.URL)
			continue
		}
		if isRefusal(err) {
			w.stop(err)
			return
		}
		n++
	}
}

// link is one connection to the engine. Its frames go through a queue that one writer
// goroutine drains (batchconn.Queue), writing every frame queued at once with one socket write:
// under load a wake-up of the engine carries many frames.
type link struct {
	ws *batchconn.Conn
	q  *batchconn.Queue
}

var errLinkClosed = errors.New("connection to the engine closed")

func newLink(ws *batchconn.Conn) *link {
	l := &link{ws: ws, q: batchconn.NewQueue(ws, true, 0, 0)} // a client masks its frames
	go func() {
		if l.q.Run() != nil {
			l.close()
		}
	}()
	return l
}

// drain waits until the frames queued so far are written (or the link failed), at most d.
func (l *link) drain(d time.Duration) {
	done := make(chan struct{})
	go func() {
		l.q.Drain()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		l.close() // wakes the waiter: the queue is stopped
	}
}

// send queues m for the writer. A write failure is reported to the senders that come after it;
// the ones before learn of it as a lost connection.
func (l *link) send(m *Message) error {
	err := l.q.Push(wire.AppendEncode(l.q.Buf(), m))
	if err == nil {
		return nil // before errors.As, whose target would be allocated on every send
	}
	var werr *batchconn.WriteError
	if errors.As(err, &werr) {
		return errLinkClosed
	}
	return err
}

// close stops the writer and closes the socket.
func (l *link) close() {
	l.q.Stop(errLinkClosed)
	_ = l.ws.Close()
}

// dialLink dials the engine.
func dialLink(ctx context.Context, url string, header http.Header) (*link, error) {
	ws, err := batchconn.Dial(ctx, url, header)
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(MaxFrameBytes)
	return newLink(ws), nil
}
