// Package cluster joins engines that share a NATS cluster (config.yaml cluster: {key_file,
// nats: {url, creds_file}}): each engine serves, to the others, the functions its own workers
// registered, one NATS queue-group subscription per function (so each call reaches one engine
// serving it), and sends a call for a function none of its workers serves to the cluster. A
// remote call answers with the result or the error the serving engine gave, with the same
// codes as a local call: function_not_found when no engine serves the function, timeout past
// the call's deadline. Local calls never touch NATS.
//
// Functions registered protected (a project token's) are never offered to the cluster: the
// engine cannot see the remote caller's token.
//
// Only engines are admitted: every message an engine sends the others (a call, its answer, an
// offer, a channel question and its answer) is signed with the cluster key the engines share
// (auth.go), and what is unsigned, badly signed, stale or replayed is dropped, so a NATS client
// without the key can neither call a function, nor forge a caller, an answer, an engine or a
// channel's holder. The NATS link itself needs credentials (creds_file, nkey_file or a TLS
// client certificate) unless the config opts out with cluster.insecure: true.
package cluster

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/backoff"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/internal/base/privfile"
)

// subjectPrefix starts every function's subject: iii.fn.<hex namespace>.<hex function id>.
const subjectPrefix = "iii.fn."

// relink is the NATS link's reconnect schedule: the project's one backoff, full jitter, so the
// engines of a cluster that lost a node do not come back in step.
var relink = backoff.Backoff{Initial: 100 * time.Millisecond, Max: 5 * time.Second}

// queueGroup is the queue group every engine subscribes a function's subject in.
const queueGroup = "iii-engines"

// Key names one function.
type Key struct{ Namespace, FunctionID string }

// Function is one function an engine offers the cluster, as the others list it.
type Function struct {
	Namespace   string `json:"namespace"`
	FunctionID  string `json:"function_id"`
	Description string `json:"description,omitempty"`
	WorkerID    string `json:"worker_id"`
	WorkerName  string `json:"worker_name,omitempty"`
	Engine      string `json:"engine"`
}

// announceSubject carries each engine's offer: iii.engines.fn.<hex engine name>.
const announceSubject = "iii.engines.fn."

// Announcements: every engine repeats its offer every announceEvery; one not heard of for
// announceTTL is gone from the others' listings.
const (
	announceEvery = 5 * time.Second
	announceTTL   = 3 * announceEvery
)

type announcement struct {
	Engine    string            `json:"engine"`
	Functions []Function        `json:"functions"`
	Workers   []json.RawMessage `json:"workers,omitempty"`
	Leaving   bool              `json:"leaving,omitempty"`
	// Channels is the engine's base URL for its stream channels (ServeChannels), "" for none.
	Channels string `json:"channels,omitempty"`
}

type peer struct {
	functions []Function
	workers   []json.RawMessage
	channels  string
	seen      time.Time
}

func subject(k Key) string {
	return subjectPrefix + hex.EncodeToString([]byte(k.Namespace)) + "." + hex.EncodeToString([]byte(k.FunctionID))
}

// Caller is who made a call, as the serving engine sees it.
type Caller struct {
	WorkerID  string `json:"worker_id"`
	Name      string `json:"name,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Engine    string `json:"engine"` // the calling engine's cluster name
}

// Request is a call sent to the cluster. On the wire (encodeCall) its Data follows the other
// fields as the caller's engine holds it, never re-encoded.
type Request struct {
	Data        json.RawMessage
	Metadata    json.RawMessage
	TimeoutMS   int64
	Traceparent string
	Baggage     string
	Caller      Caller
}

// null stands for no data or no result in a message's body.
var null = json.RawMessage("null")

// encodeCall is the message of a call of k: its envelope (every field of r but its data, each a
// uvarint length and its bytes, the timeout a uvarint: reading it back is a few bounds checks
// where JSON costs a reflective decode on every call), then its data as it is.
func encodeCall(k Key, r Request) (*nats.Msg, error) {
	if r.TimeoutMS < 0 {
		return nil, errors.New("a negative timeout")
	}
	data := r.Data
	if len(data) == 0 {
		data = null
	}
	fields := [...]string{string(r.Metadata), r.Traceparent, r.Baggage, r.Caller.WorkerID, r.Caller.Name, r.Caller.Namespace, r.Caller.Engine}
	n := len(data) + binary.MaxVarintLen64
	for _, f := range fields {
		n += len(f) + binary.MaxVarintLen64
	}
	body := make([]byte, 0, n)
	for _, f := range fields {
		body = binary.AppendUvarint(body, uint64(len(f)))
		body = append(body, f...)
	}
	body = binary.AppendUvarint(body, uint64(r.TimeoutMS))
	return &nats.Msg{Subject: subject(k), Data: append(body, data...)}, nil
}

// decodeCall reads a call's message back (encodeCall); its data is the rest of the body.
func decodeCall(m *nats.Msg) (Request, error) {
	b := m.Data
	var fields [7][]byte
	for i := range fields {
		n, used := binary.Uvarint(b)
		if used <= 0 || n > uint64(len(b)-used) {
			return Request{}, errors.New("a truncated envelope")
		}
		fields[i], b = b[used:used+int(n)], b[used+int(n):]
	}
	ms, used := binary.Uvarint(b)
	if used <= 0 || ms > math.MaxInt64 {
		return Request{}, errors.New("a truncated envelope")
	}
	var meta json.RawMessage
	if len(fields[0]) > 0 {
		if !json.Valid(fields[0]) {
			return Request{}, errors.New("metadata that is not JSON")
		}
		meta = json.RawMessage(fields[0])
	}
	return Request{Data: b[used:], Metadata: meta, TimeoutMS: int64(ms), Traceparent: string(fields[1]), Baggage: string(fields[2]),
		Caller: Caller{WorkerID: string(fields[3]), Name: string(fields[4]), Namespace: string(fields[5]), Engine: string(fields[6])}}, nil
}

// encodeReply is the answer to the call that asked on subj: the result as the body, or, for an
// error, the error in the envelope header.
func encodeReply(subj string, result json.RawMessage, perr *protocol.Error) *nats.Msg {
	m := &nats.Msg{Subject: subj, Data: result}
	if perr != nil {
		b, _ := json.Marshal(perr)
		m.Header = nats.Header{hdrEnv: {string(b)}}
		m.Data = nil
	}
	if len(m.Data) == 0 {
		m.Data = null // never an empty body, which is the server's no-responders status
	}
	return m
}

// decodeReply reads an answer back (encodeReply).
func decodeReply(m *nats.Msg) (json.RawMessage, *protocol.Error, error) {
	if env := m.Header.Get(hdrEnv); env != "" {
		var perr protocol.Error
		if err := json.Unmarshal([]byte(env), &perr); err != nil {
			return nil, nil, err
		}
		return nil, &perr, nil
	}
	return m.Data, nil, nil
}

// ServeFunc runs a call from another engine against this engine's own workers only (never the
// cluster again), within timeout, and gives its outcome to answer, once, from any goroutine.
// It must not wait for the outcome: it is called on the goroutine that receives every call of
// the function, so a call that waits goes on in a goroutine of its own. ctx ends when the engine
// leaves the cluster; r.Data may be kept.
type ServeFunc func(ctx context.Context, k Key, r Request, timeout time.Duration, answer func(json.RawMessage, *protocol.Error))

// Cluster is one engine's link to the others.
type Cluster struct {
	nc    *nats.Conn
	name  string
	serve ServeFunc
	log   *slog.Logger
	ctx   context.Context
	stop  context.CancelFunc
	rows  func() []json.RawMessage
	auth  *signer

	mu        sync.Mutex
	advertise string // this engine's channel base URL, announced (ServeChannels)
	subs      map[Key]*nats.Subscription
	offered   []Function      // what Sync was last given, announced again every announceEvery
	peers     map[string]peer // the other engines' offers, by engine name
	heardNew  chan struct{}   // closed, and replaced, whenever an offer is recorded

	inbox   string // the prefix of the reply subjects of this engine's questions (replies.go)
	tokens  atomic.Uint64
	waitMu  sync.Mutex
	waiting map[string]*waiter // the questions awaiting an answer, by reply token
}

// Options says how to reach the cluster.
type Options struct {
	URL string // comma-separated nats:// URLs
	// The engine's NATS credentials: at least one of a creds file, an nkey seed file, or a TLS
	// client certificate and its key (TLSCAFile, optional, is the servers' CA), unless Insecure.
	CredsFile, NkeyFile, TLSCertFile, TLSKeyFile, TLSCAFile string
	// Insecure lets the engine join with no NATS credentials (config cluster.insecure: true); a
	// warning says so at start.
	Insecure bool
	// Key is the cluster key every engine of the cluster shares; when empty it is read from
	// KeyFile (LoadKey).
	Key     []byte
	KeyFile string
	Name    string // this engine's name in the cluster (its address)
	Logger  *slog.Logger
	// Workers, when set, gives the rows of this engine's workers, announced with its functions
	// (each a JSON object the engine's workers list shows).
	Workers func() []json.RawMessage
}

// Connect joins the cluster. The NATS client reconnects on its own (to any of the URLs and the
// servers the cluster announces) for as long as the engine runs.
// It refuses, with CONFIG_INVALID naming the config key, a link with no NATS credentials that
// is not Insecure and a missing or weak cluster key.
func Connect(o Options, serve ServeFunc) (*Cluster, error) {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	opts := []nats.Option{nats.Name("iii engine " + o.Name), nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(func(attempts int) time.Duration { return relink.Jitter(attempts) })}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		return nil, errcode.New(errcode.ConfigInvalid, "cluster.nats: tls_cert_file and tls_key_file go together (the engine's TLS client certificate and its key)")
	}
	switch {
	case o.CredsFile != "" || o.NkeyFile != "" || o.TLSCertFile != "":
	case o.Insecure:
		log.Warn("cluster: joining the NATS cluster without credentials (cluster.insecure: true): any client of these NATS servers can read the calls between engines and deny service; give the engines creds_file, nkey_file or a TLS client certificate and restrict the subjects to their account", "url", redact(o.URL))
	default:
		return nil, errcode.New(errcode.ConfigInvalid, "cluster.nats: %s is given without credentials (creds_file, nkey_file, or tls_cert_file and tls_key_file); set cluster.insecure: true to join an unauthenticated NATS on purpose", redact(o.URL))
	}
	key := o.Key
	if len(key) == 0 {
		var err error
		if key, err = LoadKey(o.KeyFile); err != nil {
			return nil, err
		}
	} else if len(key) < MinKeyBytes {
		return nil, errcode.New(errcode.ConfigInvalid, "cluster.key_file: the cluster key holds %d bytes; it needs at least %d", len(key), MinKeyBytes)
	}
	for _, f := range []struct{ key, path string }{{"creds_file", o.CredsFile}, {"nkey_file", o.NkeyFile}, {"tls_key_file", o.TLSKeyFile}} {
		if f.path == "" {
			continue
		}
		if err := privfile.Check(f.path, false); err != nil { // they hold the engines' NATS secret
			return nil, errcode.New(errcode.ConfigInvalid, "cluster.nats.%s: %w", f.key, err)
		}
	}
	if o.CredsFile != "" {
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.NkeyFile != "" {
		nk, err := nats.NkeyOptionFromSeed(o.NkeyFile)
		if err != nil {
			return nil, errcode.New(errcode.ConfigInvalid, "cluster.nats.nkey_file: %w", err)
		}
		opts = append(opts, nk)
	}
	if o.TLSCertFile != "" {
		opts = append(opts, nats.ClientCert(o.TLSCertFile, o.TLSKeyFile))
	}
	if o.TLSCAFile != "" {
		opts = append(opts, nats.RootCAs(o.TLSCAFile))
	}
	opts = append(opts,
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) { log.Warn("cluster: NATS connection lost; reconnecting", "err", err) }),
		nats.ReconnectHandler(func(nc *nats.Conn) { log.Info("cluster: NATS reconnected", "server", nc.ConnectedUrlRedacted()) }))
	nc, err := nats.Connect(o.URL, opts...)
	if err != nil {
		return nil, errcode.New(errcode.ListenFailed, "cluster: connecting to NATS at %s: %w", redact(o.URL), err)
	}
	ctx, stop := context.WithCancel(context.Background())
	c := &Cluster{nc: nc, name: o.Name, serve: serve, log: log, ctx: ctx, stop: stop, rows: o.Workers, auth: newSigner(key, o.Name, log),
		subs: map[Key]*nats.Subscription{}, peers: map[string]peer{}, heardNew: make(chan struct{}), waiting: map[string]*waiter{}}
	if err := c.subscribeReplies(); err != nil {
		nc.Close()
		return nil, errcode.New(errcode.ListenFailed, "cluster: subscribing to the answers of the other engines: %w", err)
	}
	if _, err := nc.Subscribe(announceSubject+"*", c.heard); err != nil {
		nc.Close()
		return nil, errcode.New(errcode.ListenFailed, "cluster: subscribing to the engines' offers: %w", err)
	}
	_ = nc.Flush() // subscribed before this engine first announces, so it hears the answers
	go c.announceLoop()
	return c, nil
}

// heard records another engine's offer; one not signed by that engine is dropped.
func (c *Cluster) heard(m *nats.Msg) {
	engine, _, ok := c.auth.verify(m, kindAnnounce, "")
	if !ok || engine == c.name {
		return
	}
	var a announcement
	if json.Unmarshal(m.Data, &a) != nil || a.Engine != engine || m.Subject != announceSubject+hex.EncodeToString([]byte(engine)) {
		c.auth.drop(kindAnnounce, m.Subject, "the offer names another engine than its signer")
		return
	}
	for i := range a.Functions {
		a.Functions[i].Engine = engine
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if a.Leaving {
		delete(c.peers, a.Engine)
		return
	}
	if _, known := c.peers[a.Engine]; !known {
		go c.announce(false) // a newcomer learns of this engine (its channel URL) at once
	}
	c.peers[a.Engine] = peer{functions: a.Functions, workers: a.Workers, channels: a.Channels, seen: time.Now()}
	close(c.heardNew)
	c.heardNew = make(chan struct{})
}

func (c *Cluster) announce(leaving bool) {
	var rows []json.RawMessage
	if c.rows != nil && !leaving {
		rows = c.rows()
	}
	c.mu.Lock()
	a := announcement{Engine: c.name, Functions: c.offered, Workers: rows, Leaving: leaving, Channels: c.advertise}
	b, _ := json.Marshal(a)
	c.mu.Unlock()
	m := &nats.Msg{Subject: announceSubject + hex.EncodeToString([]byte(c.name)), Data: b}
	c.auth.sign(m, kindAnnounce, "")
	_ = c.nc.PublishMsg(m)
}

func (c *Cluster) announceLoop() {
	t := time.NewTicker(announceEvery)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			c.announce(false)
		}
	}
}

// RemoteWorker is a worker row another engine announced, with that engine's name.
type RemoteWorker struct {
	Engine string
	Row    json.RawMessage
}

// RemoteWorkers lists the workers the other engines announced last (at most announceEvery old).
func (c *Cluster) RemoteWorkers() []RemoteWorker {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []RemoteWorker
	for name, p := range c.livePeersLocked() {
		for _, r := range p.workers {
			out = append(out, RemoteWorker{Engine: name, Row: r})
		}
	}
	return out
}

// livePeersLocked forgets the engines not heard of for announceTTL and returns the others.
func (c *Cluster) livePeersLocked() map[string]peer {
	for name, p := range c.peers {
		if time.Since(p.seen) > announceTTL {
			delete(c.peers, name)
		}
	}
	return c.peers
}

// Remote lists the functions the other engines offer now, by namespace and id.
func (c *Cluster) Remote() []Function {
	c.mu.Lock()
	var out []Function
	for _, p := range c.livePeersLocked() {
		out = append(out, p.functions...)
	}
	c.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		if out[i].FunctionID != out[j].FunctionID {
			return out[i].FunctionID < out[j].FunctionID
		}
		return out[i].Engine < out[j].Engine
	})
	return out
}

// Name is this engine's name in the cluster.
func (c *Cluster) Name() string { return c.name }

// Sync makes the functions this engine offers the cluster exactly local: it subscribes the new
// ones, drops those no local worker serves any more, and tells the other engines.
func (c *Cluster) Sync(local []Function) {
	defer c.announce(false)
	want := make(map[Key]bool, len(local))
	for _, f := range local {
		f.Engine = c.name
		want[Key{f.Namespace, f.FunctionID}] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offered = make([]Function, len(local))
	for i, f := range local {
		f.Engine = c.name
		c.offered[i] = f
	}
	for k, s := range c.subs {
		if !want[k] {
			_ = s.Unsubscribe()
			delete(c.subs, k)
		}
	}
	for k := range want {
		if c.subs[k] != nil {
			continue
		}
		s, err := c.nc.QueueSubscribe(subject(k), queueGroup, func(m *nats.Msg) { c.handle(k, m) })
		if err != nil {
			c.log.Warn("cluster: cannot offer a function", "function_id", k.FunctionID, "namespace", k.Namespace, "err", err)
			continue
		}
		c.subs[k] = s
	}
}

// handle serves a call another engine sent; one no engine signed is dropped unanswered, and
// so is one whose caller claims another engine than its signer. It runs on the subscription's
// goroutine and does not wait for the outcome (ServeFunc): starting a goroutine per call costs
// more than the rest of the hop when the engine is otherwise idle.
func (c *Cluster) handle(k Key, m *nats.Msg) {
	engine, nonce, ok := c.auth.verify(m, kindCall, "")
	if !ok || m.Reply == "" {
		return
	}
	answer := func(result json.RawMessage, perr *protocol.Error) {
		a := encodeReply(m.Reply, result, perr)
		c.auth.sign(a, kindReply, nonce)
		if err := c.nc.PublishMsg(a); err != nil {
			c.log.Debug("cluster: the caller's engine left before the answer", "function_id", k.FunctionID, "err", err)
		}
	}
	r, err := decodeCall(m)
	switch {
	case err != nil:
		answer(nil, protocol.NewError(errcode.InvalidArguments, "cluster: a malformed call of %s: %v", k.FunctionID, err))
	case r.Caller.Engine != engine:
		c.auth.drop(kindCall, m.Subject, "the caller names another engine than its signer")
	default:
		c.serve(c.ctx, k, r, time.Duration(r.TimeoutMS)*time.Millisecond, answer)
	}
}

// Call runs k on another engine of the cluster and returns its answer. found is false when no
// engine serves k (the caller answers function_not_found as for a local call).
func (c *Cluster) Call(ctx context.Context, k Key, r Request, timeout time.Duration) (res json.RawMessage, perr *protocol.Error, found bool) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The serving engine gets what is left of the caller's time, so that it stops when the
	// caller stops waiting.
	if d, ok := ctx.Deadline(); ok {
		r.TimeoutMS = max(time.Until(d).Milliseconds(), 1)
	}
	r.Caller.Engine = c.name
	m, err := encodeCall(k, r)
	if err != nil {
		return nil, protocol.NewError(errcode.InvalidArguments, "cluster: %v", err), true
	}
	msg, _, err := c.request(ctx, m, kindCall, kindReply)
	return callOutcome(k, timeout, msg, err)
}

// CallAsync is Call without a goroutine waiting for the answer: done gets what Call would
// return, once, from the goroutine that receives the answer or, past timeout, from a timer's.
// r is encoded before CallAsync returns, so its fields may be reused then.
func (c *Cluster) CallAsync(k Key, r Request, timeout time.Duration, done func(res json.RawMessage, perr *protocol.Error, found bool)) {
	r.TimeoutMS = max(timeout.Milliseconds(), 1)
	r.Caller.Engine = c.name
	m, err := encodeCall(k, r)
	if err != nil {
		done(nil, protocol.NewError(errcode.InvalidArguments, "cluster: %v", err), true)
		return
	}
	c.requestAsync(m, kindCall, kindReply, timeout, func(msg *nats.Msg, _ string, err error) {
		done(callOutcome(k, timeout, msg, err))
	})
}

// callOutcome is what a call of k answers, given the answer msg or the error of awaiting it.
func callOutcome(k Key, timeout time.Duration, msg *nats.Msg, err error) (json.RawMessage, *protocol.Error, bool) {
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, nil, false
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return nil, protocol.NewError(errcode.Timeout, "function %s did not answer within %dms (served by another engine of the cluster)", k.FunctionID, timeout.Milliseconds()), true
	case errors.Is(err, context.Canceled):
		return nil, protocol.NewError(errcode.InvocationStopped, "the caller of %s went away", k.FunctionID), true
	case err != nil:
		return nil, protocol.NewError(errcode.InvocationStopped, "cluster: calling %s over NATS: %v", k.FunctionID, err), true
	}
	res, perr, err := decodeReply(msg)
	if err != nil {
		return nil, protocol.NewError(errcode.InvocationFailed, "cluster: the error answered by %s is not JSON: %v", k.FunctionID, err), true
	}
	return res, perr, true
}

// Dropped counts the messages this engine dropped since it joined: not signed by an engine of
// the cluster, badly signed, stale or replayed.
func (c *Cluster) Dropped() uint64 { return c.auth.dropped.Load() }

// channelSubject asks which engine holds a stream channel: iii.ch.<channel id>.
const channelSubject = "iii.ch."

// channelAsk bounds ChannelOwner's question.
const channelAsk = time.Second

// ServeChannels announces the WebSocket base URL (ws://host:port) other engines dial to reach
// this engine's stream channels, and answers an engine of the cluster that asks for a channel
// has reports this engine holds. Questions no engine signed are dropped unanswered.
func (c *Cluster) ServeChannels(advertise string, has func(id string) bool) error {
	c.mu.Lock()
	c.advertise = advertise
	c.mu.Unlock()
	_, err := c.nc.Subscribe(channelSubject+"*", func(m *nats.Msg) {
		_, nonce, ok := c.auth.verify(m, kindAskChan, "")
		if !ok || m.Reply == "" {
			return
		}
		if id := strings.TrimPrefix(m.Subject, channelSubject); has(id) {
			a := &nats.Msg{Subject: m.Reply}
			c.auth.sign(a, kindChanHere, nonce)
			_ = c.nc.PublishMsg(a)
		}
	})
	if err == nil {
		c.announce(false)
	}
	return err
}

// ChannelOwner is the engine that holds channel id and the base URL it announced for its
// channels; "" when none answers. Only an answer signed by an engine of the cluster that has
// announced a channel URL counts, and the URL is the one of its signed offer, never one given in
// the answer.
func (c *Cluster) ChannelOwner(ctx context.Context, id string) (engine, base string) {
	if id == "" || strings.ContainsAny(id, ".*> \t") {
		return "", ""
	}
	ctx, cancel := context.WithTimeout(ctx, channelAsk)
	defer cancel()
	a, engine, err := c.request(ctx, &nats.Msg{Subject: channelSubject + id}, kindAskChan, kindChanHere)
	if err != nil {
		return "", "" // none answered in time, or no engine serves channels
	}
	// The holder's offer may still be on its way (an engine that just joined): wait for it
	// within the question's time.
	for {
		c.mu.Lock()
		p, known := c.livePeersLocked()[engine]
		heard := c.heardNew
		c.mu.Unlock()
		if known && p.channels != "" {
			return engine, p.channels
		}
		select {
		case <-heard:
		case <-ctx.Done():
			c.auth.drop(kindChanHere, a.Subject, "the holder "+engine+" announced no channel URL")
			return "", ""
		}
	}
}

// Close leaves the cluster: the others drop its functions at once, and calls being served for
// them are stopped.
func (c *Cluster) Close() {
	c.announce(true)
	c.stop()
	_ = c.nc.Drain()
}

// redact drops user information from NATS URLs for messages.
func redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, u := range parts {
		if at := strings.LastIndex(u, "@"); at >= 0 {
			if s := strings.Index(u, "://"); s >= 0 && s < at {
				parts[i] = u[:s+3] + "redacted@" + u[at+1:]
			}
		}
	}
	return strings.Join(parts, ",")
}
