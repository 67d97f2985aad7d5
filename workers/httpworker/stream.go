package httpworker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// Codes of streamed requests and responses.
const (
	// CodeStreamUnavailable answers 503 when the request's stream channels cannot be made (the
	// engine's CHANNEL_LIMIT, a lost engine connection).
	CodeStreamUnavailable = "STREAM_UNAVAILABLE"
	// CodeResponseTimeout answers 504 when a handler answered null (it streams) but its response
	// channel carried no byte and did not end within default_timeout of the call.
	CodeResponseTimeout = "RESPONSE_TIMEOUT"
	// CodeResponseAborted answers 502 when the response channel was aborted before its first
	// byte and the handler answered null.
	CodeResponseAborted = "RESPONSE_ABORTED"
)

// InlineBodyBytes is the largest body that is read whole before the handler runs when it is not
// JSON (its text is the request's body); a larger one streams into request_body as it arrives.
const InlineBodyBytes = 64 << 10

// streamChunk is the most the worker reads at once from a request body or a response channel.
const streamChunk = 64 << 10

// attachGrace is how long the worker waits for a normal answer before it connects its own
// channel ends: a handler that answers {status_code, ...} sooner costs no WebSocket connection.
// A handler that streams meanwhile loses nothing: the engine holds its first frames (and the
// request body waits) until the worker connects.
const attachGrace = 2 * time.Millisecond

// reapTimeout bounds the removal of a request's channels.
const reapTimeout = 5 * time.Second

// Channels makes and opens a request's stream channels: the engine's engine::channels::create
// and its /ws/channels endpoint.
type Channels interface {
	Create(ctx context.Context) (reader, writer protocol.ChannelRef, err error)
	OpenWriter(ctx context.Context, ref protocol.ChannelRef) (*protocol.ChannelWriter, error)
	OpenReader(ctx context.Context, ref protocol.ChannelRef) (*protocol.ChannelReader, error)
	// Remove aborts and forgets the channel of ref (engine::channels::remove).
	Remove(ctx context.Context, ref protocol.ChannelRef) error
}

// WorkerChannels is Channels through a worker's engine connection.
func WorkerChannels(w *protocol.Worker) Channels { return workerChannels{w} }

type workerChannels struct{ w *protocol.Worker }

func (c workerChannels) Create(ctx context.Context) (protocol.ChannelRef, protocol.ChannelRef, error) {
	return c.w.CreateChannel(ctx)
}

func (c workerChannels) OpenWriter(ctx context.Context, ref protocol.ChannelRef) (*protocol.ChannelWriter, error) {
	return protocol.DialWriter(ctx, c.w.URL(), ref)
}

func (c workerChannels) Remove(ctx context.Context, ref protocol.ChannelRef) error {
	return c.w.RemoveChannel(ctx, ref)
}

func (c workerChannels) OpenReader(ctx context.Context, ref protocol.ChannelRef) (*protocol.ChannelReader, error) {
	return protocol.DialReader(ctx, c.w.URL(), ref)
}

// SetChannels gives the server its stream channels: from then on every handler call carries
// request_body and response (without, a handler gets neither and bodies are read whole).
func (s *Server) SetChannels(c Channels) { s.chans.Store(&c) }

// channels is what SetChannels set, nil before; safe beside a SetChannels (requests in flight
// keep working with the Channels they read).
func (s *Server) channels() Channels {
	if c := s.chans.Load(); c != nil {
		return *c
	}
	return nil
}

// streams are one request's two channels: the refs of both ends of each, and whether the worker
// connected its own ends (the request body's writer, the response's reader).
type streams struct {
	reqReader, reqWriter protocol.ChannelRef
	resReader, resWriter protocol.ChannelRef
	pumped, read         chan struct{} // the request body pump ended; the body is read
}

// openStreams makes the request's two channels (both calls at once). The worker connects its
// ends later, beside the function's call, so the calls are all a normal answer waits for.
func (s *Server) openStreams(ctx context.Context) (*streams, error) {
	st := &streams{pumped: make(chan struct{}), read: make(chan struct{})}
	var resErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		st.resReader, st.resWriter, resErr = s.channels().Create(ctx)
	}()
	var err error
	st.reqReader, st.reqWriter, err = s.channels().Create(ctx)
	<-done
	return st, errors.Join(err, resErr)
}

// reap removes both channels once the response is done, as iii's http worker does, so the
// engine forgets them now, also the ends nobody connected (else each would wait for the
// engine's attach deadline): a handler still holding an end gets the abort.
func (s *Server) reap(st *streams) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), reapTimeout)
		defer cancel()
		for _, ref := range []protocol.ChannelRef{st.reqWriter, st.resReader} {
			if err := s.channels().Remove(ctx, ref); err != nil {
				s.log.Warn("removing a request's stream channel", "channel_id", ref.ChannelID, "err", err)
			}
		}
	}()
}

// peerAwaiter is Channels that tell when the other end of a channel connects.
type peerAwaiter interface {
	// AwaitPeer answers once, of one of the channels of refs, the end opposite ref connects
	// (attached) or the channel is gone; an error when it cannot tell.
	AwaitPeer(ctx context.Context, refs []protocol.ChannelRef) (channelID string, attached bool, err error)
}

// awaitPeers connects the worker's ends of st (reqNow, resNow) each once the handler connects
// the other; when it cannot tell (an error), both, as without.
func awaitPeers(ctx context.Context, aw peerAwaiter, st *streams, reqNow, resNow func()) {
	refs := []protocol.ChannelRef{st.reqWriter, st.resReader}
	for len(refs) > 0 {
		id, attached, err := aw.AwaitPeer(ctx, refs)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			reqNow()
			resNow()
			return
		case !attached:
			return
		}
		kept := refs[:0]
		for _, r := range refs {
			switch {
			case r.ChannelID != id:
				kept = append(kept, r)
			case r == st.reqWriter:
				reqNow()
			default:
				resNow()
			}
		}
		refs = kept
	}
}

// bodyError is the answer to a request whose body failed.
type bodyError struct {
	status    int
	code, msg string
}

// classifyBodyError is the answer for err, an error reading a request body.
func (s *Server) classifyBodyError(err error) *bodyError {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return &bodyError{http.StatusRequestEntityTooLarge, "BODY_TOO_LARGE", "the request body is over the limit (max_body_bytes)"}
	case errors.Is(err, os.ErrDeadlineExceeded):
		return &bodyError{http.StatusRequestTimeout, CodeBodyTimeout, fmt.Sprintf("the request body did not arrive within %d ms (body_read_timeout)", s.cfg.BodyReadTimeoutMS)}
	}
	return &bodyError{http.StatusBadRequest, "BAD_REQUEST", err.Error()}
}

func (s *Server) answerBodyError(w http.ResponseWriter, r *http.Request, err error) {
	be := s.classifyBodyError(err)
	w.Header().Set("Connection", "close")
	s.answerError(w, r, be.status, be.code, be.msg)
}

// pumpBody connects the request body's writer and streams the body into it. A body that fails
// while it streams goes to bodyErr.
func (s *Server) pumpBody(ctx context.Context, st *streams, attach <-chan struct{}, rc *http.ResponseController, first []byte, rest io.Reader, bodyErr chan<- error) {
	select {
	case <-attach:
	case <-ctx.Done():
		close(st.read)
		return
	}
	wr, err := s.channels().OpenWriter(ctx, st.reqWriter)
	if err != nil {
		close(st.read)
		return
	}
	err = pump(wr, first, rest, st.read)
	switch {
	case rest == nil:
	case err == nil:
		// The body is read: no deadline while the function runs (see readBody).
		_ = rc.SetReadDeadline(time.Time{})
	case ctx.Err() == nil:
		bodyErr <- err // before the abort, which the handler may fail on
		_ = wr.Abort("the http request body failed: " + err.Error())
	}
}

// pump writes the body's first bytes and then the rest of it (when streamed) into w, then
// closes w; a failure is returned (the caller aborts w). read is closed once the body is read.
func pump(w *protocol.ChannelWriter, first []byte, rest io.Reader, read chan<- struct{}) error {
	defer func() {
		if read != nil {
			close(read)
		}
	}()
	if len(first) > 0 {
		if _, err := w.Write(first); err != nil {
			return err
		}
	}
	if rest != nil {
		buf := make([]byte, streamChunk)
		for {
			n, err := rest.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return werr
				}
			}
			if err == io.EOF {
				close(read)
				read = nil
				break
			}
			if err != nil {
				return err
			}
		}
	}
	return w.Close()
}

// resEvent is one thing read from the response channel: a text message, body bytes, or its end
// (io.EOF when the handler closed it, else why it was aborted).
type resEvent struct {
	msg  *string
	data []byte
	err  error
}

// readResponse passes what the response channel carries to events, in order, until it ends or
// ctx does.
func readResponse(ctx context.Context, r *protocol.ChannelReader, events chan<- resEvent) {
	send := func(ev resEvent) bool {
		select {
		case events <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	r.OnMessage(func(m string) { send(resEvent{msg: &m}) })
	for {
		buf := make([]byte, streamChunk)
		n, err := r.Read(buf)
		if n > 0 && !send(resEvent{data: buf[:n]}) {
			return
		}
		if err != nil {
			send(resEvent{err: err})
			return
		}
	}
}

// control applies a set_status or set_headers message of the response channel; other messages
// are ignored, as in iii.
func control(msg string, status *int, headers map[string]string) {
	var m struct {
		Type       string            `json:"type"`
		StatusCode int               `json:"status_code"`
		Headers    map[string]string `json:"headers"`
	}
	if json.Unmarshal([]byte(msg), &m) != nil {
		return
	}
	switch m.Type {
	case "set_status":
		if m.StatusCode >= 100 && m.StatusCode <= 599 {
			*status = m.StatusCode
		}
	case "set_headers":
		for k, v := range m.Headers {
			headers[k] = v
		}
	}
}

type callResult struct {
	out json.RawMessage
	err error
}

func isNull(out json.RawMessage) bool {
	return len(out) == 0 || string(out) == "null"
}

// serveStreamed runs the route's function with the request's channels and answers from its
// result or, when it streams, from its response channel. body is the request body: first its
// bytes read so far, then rest (nil when it was read whole) until its end.
func (s *Server) serveStreamed(w http.ResponseWriter, r *http.Request, rt *route, req map[string]any, first []byte, rest io.Reader, timeout time.Duration) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	st, err := s.openStreams(ctx)
	if err != nil {
		if rest != nil {
			w.Header().Set("Connection", "close")
		}
		pe := protocol.AsError(err)
		s.answerError(w, r, http.StatusServiceUnavailable, CodeStreamUnavailable, "the request's stream channels could not be opened: "+pe.Message, "cause_code", pe.Code)
		return
	}
	defer s.reap(st)
	defer cancel() // first of the deferred: the worker's ends close before reap runs

	attachReq, attachRes, attachNow, stopAttach := s.scheduleAttach(ctx, st, rest != nil)
	defer stopAttach()
	bodyErr, drainBody := s.startBodyPump(ctx, cancel, w, st, attachReq, first, rest)
	defer drainBody()
	events := s.startResponseReader(ctx, st, attachRes)
	results := s.startCall(ctx, rt, req, st, timeout)
	s.answerStreamed(w, r, rt, attachNow, results, events, bodyErr, timeout)
}

// scheduleAttach decides when the worker connects its ends of the request's channels and
// returns the channels closed when it should connect request_body and response, a function
// that connects both at once, and a function to defer that stops what is still pending.
//
// A call that answers within attachGrace costs no connection. After it, the worker connects
// each of its ends once the handler connects the other (with channels that tell, a
// ChannelPool), else both at once; and both once the call has answered null. A streamed body
// (streamed true) flows at once.
func (s *Server) scheduleAttach(ctx context.Context, st *streams, streamed bool) (attachReq, attachRes <-chan struct{}, attachNow, stop func()) {
	req, res := make(chan struct{}), make(chan struct{})
	reqNow, resNow := sync.OnceFunc(func() { close(req) }), sync.OnceFunc(func() { close(res) })
	attachNow = func() { reqNow(); resNow() }
	aw, lazy := s.channels().(peerAwaiter)
	switch {
	case streamed:
		attachNow()
		stop = func() {}
	case lazy:
		s.wg.Add(1)
		grace := time.AfterFunc(attachGrace, func() {
			defer s.wg.Done()
			awaitPeers(ctx, aw, st, reqNow, resNow)
		})
		stop = func() {
			if grace.Stop() {
				s.wg.Done()
			}
		}
	default:
		grace := time.AfterFunc(attachGrace, attachNow)
		stop = func() { grace.Stop() }
	}
	return req, res, attachNow, stop
}

// startBodyPump streams the request body into request_body, once attach is closed, while the
// function runs, and returns the channel its failure comes on and a function to defer that,
// for a body still streaming (rest not nil), cancels ctx and waits for the pump to end.
func (s *Server) startBodyPump(ctx context.Context, cancel context.CancelFunc, w http.ResponseWriter, st *streams, attach <-chan struct{}, first []byte, rest io.Reader) (<-chan error, func()) {
	bodyErr := make(chan error, 1)
	rc := http.NewResponseController(w)
	if rest != nil {
		_ = rc.EnableFullDuplex()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(st.pumped)
		s.pumpBody(ctx, st, attach, rc, first, rest, bodyErr)
	}()
	if rest == nil {
		return bodyErr, func() {}
	}
	return bodyErr, func() {
		cancel()
		select {
		case <-st.read:
		default:
			// Unblock a body read in progress: the body must not be read after ServeHTTP
			// returns, and the connection closes after this answer.
			_ = rc.SetReadDeadline(time.Now())
		}
		<-st.pumped
	}
}

// startResponseReader opens the response channel once attach is closed and returns the
// channel its messages, bytes and end come on (an abort when it could not be opened).
func (s *Server) startResponseReader(ctx context.Context, st *streams, attach <-chan struct{}) chan resEvent {
	events := make(chan resEvent)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		select {
		case <-attach:
		case <-ctx.Done():
			return
		}
		rd, err := s.channels().OpenReader(ctx, st.resReader)
		if err != nil {
			select {
			case events <- resEvent{err: &protocol.ChannelAbortedError{Detail: "the http worker could not open the response channel: " + err.Error()}}:
			case <-ctx.Done():
			}
			return
		}
		defer rd.Close()
		readResponse(ctx, rd, events)
	}()
	return events
}

// startCall calls the route's function with req and the request's channel ends and returns
// the channel its result comes on.
func (s *Server) startCall(ctx context.Context, rt *route, req map[string]any, st *streams, timeout time.Duration) chan callResult {
	payload := make(map[string]any, len(req)+2)
	for k, v := range req {
		payload[k] = v
	}
	payload["request_body"] = st.reqReader
	payload["response"] = st.resWriter
	results := make(chan callResult, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		out, err := s.call(ctx, rt.t, rt.t.FunctionID, payload, timeout)
		results <- callResult{out, err}
	}()
	return results
}

// answerStreamed answers the request from the function's result, the response channel's
// events and the body pump's failure, whichever decides first: a result that is not null, a
// failure, the channel's first byte (then streamed), its end after a null result, or the
// channel neither sending a byte nor ending within timeout.
func (s *Server) answerStreamed(w http.ResponseWriter, r *http.Request, rt *route, attachNow func(), results chan callResult, events chan resEvent, bodyErr <-chan error, timeout time.Duration) {
	status, headers := http.StatusOK, map[string]string{}
	var result *callResult
	var ended error // the response channel's end before its first byte
	start := time.NewTimer(timeout)
	defer start.Stop()
	for {
		if ended != nil && result != nil {
			break
		}
		select {
		case res := <-results:
			if res.err != nil {
				select {
				case err := <-bodyErr: // the handler failed on the body's failure
					s.answerBodyError(w, r, err)
				default:
					s.failCall(w, r, "handler", rt.t.FunctionID, res.err)
				}
				return
			}
			if !isNull(res.out) {
				s.respond(w, res.out)
				return
			}
			result, results = &res, nil
			attachNow()
		case ev := <-events:
			switch {
			case ev.msg != nil:
				control(*ev.msg, &status, headers)
			case ev.data != nil:
				s.stream(w, r, rt, ev.data, status, headers, events, results)
				return
			default:
				ended, events = ev.err, nil
			}
		case err := <-bodyErr:
			s.answerBodyError(w, r, err)
			return
		case <-start.C:
			what := "answered null but its response channel"
			if result == nil {
				what = "did not answer and its response channel"
			}
			s.answerError(w, r, http.StatusGatewayTimeout, CodeResponseTimeout,
				fmt.Sprintf("%s %s neither sent a byte nor ended within %d ms (default_timeout)", rt.t.FunctionID, what, s.cfg.DefaultTimeoutMS),
				"function_id", rt.t.FunctionID)
			return
		case <-r.Context().Done():
			return // the client left: the deferred cancel aborts both channels
		}
	}
	// The handler answered null and its response channel ended without a byte.
	if ended != io.EOF {
		s.answerError(w, r, http.StatusBadGateway, CodeResponseAborted,
			fmt.Sprintf("%s answered null but its response channel was aborted: %v", rt.t.FunctionID, ended), "function_id", rt.t.FunctionID)
		return
	}
	writeHead(w, status, headers)
}

func writeHead(w http.ResponseWriter, status int, headers map[string]string) {
	for k, v := range headers {
		w.Header().Set(k, v)
	}
	w.WriteHeader(status)
}

// stream answers with status and headers and then the response channel's bytes, first and
// what follows on events, each flushed to the client as it comes, until the channel ends. A
// channel aborted, or a handler failing, after the first byte can no longer change the status:
// the connection is cut without the end of the body (http.ErrAbortHandler), so the client sees
// a truncated response rather than a complete one. A handler's timeout there is not a failure:
// a stream may outlast default_timeout (an SSE feed); it ends with its channel, the client
// leaving, or the engine's channel idle deadline.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, rt *route, first []byte, status int, headers map[string]string, events <-chan resEvent, results <-chan callResult) {
	writeHead(w, status, headers)
	rc := http.NewResponseController(w)
	write := func(b []byte) bool {
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	cut := func(why string, attrs ...any) {
		s.log.Error("http response stream cut", append([]any{"error_id", uuid.NewString(), "why", why, "function_id", rt.t.FunctionID,
			"method", r.Method, "path", r.URL.Path}, attrs...)...)
		panic(http.ErrAbortHandler)
	}
	if !write(first) {
		return
	}
	for {
		select {
		case ev := <-events:
			switch {
			case ev.data != nil:
				if !write(ev.data) {
					return
				}
			case ev.msg != nil:
				// iii ignores control messages after the first byte.
			case ev.err == io.EOF:
				return
			default:
				cut("the response channel was aborted", "err", ev.err.Error())
			}
		case res := <-results:
			results = nil
			if res.err != nil {
				pe := protocol.AsError(res.err)
				if pe.Code != errcode.Timeout && pe.Code != errcode.ClientTimeout {
					cut("the handler failed while streaming", "code", pe.Code, "message", pe.Message)
				}
			}
		case <-r.Context().Done():
			return
		}
	}
}
