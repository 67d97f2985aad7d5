// Package queue is the queue worker: durable messages on a JetStream stream, delivered to
// functions with retries, a dead-letter queue, per-queue concurrency and FIFO order within a
// message group, as iii's queue worker and the engine's enqueue action define them.
//
// Two kinds of message share one stream per namespace (IIIQ_<namespace>):
//
//   - Jobs: an invocation with action {type: enqueue, queue: Q}. The engine hands it to
//     queue::enqueue {queue, function_id, namespace?, data, metadata?, group?, message_id?},
//     which stores it and answers {messageReceiptId, message_id} once it is on disk; the worker
//     then calls function_id with data. One durable consumer per queue.
//   - Topic messages: queue::publish {topic, data, group?, message_id?} -> {messageReceiptId,
//     message_id}. Each "queue" trigger {topic, max_retries?, backoff_ms?, concurrency?} is a
//     subscriber with its own durable consumer (named by topic and function), created when the
//     trigger is registered; it gets every message published from then on.
//
// Delivery is at least once: a worker that dies (or stops) between a call and its
// acknowledgement leaves the message to be delivered again. Every message has a stable id, the
// caller's message_id or a generated UUID, stored as JetStream's Nats-Msg-Id: a second
// enqueue or publish of the same id within the stream's duplicate window (DuplicateWindow) is
// not stored again (the reply says duplicate: true), and every delivery of a message passes
// the id to the function as message_id in the invocation's metadata, for the function to
// deduplicate on.
//
// A durable consumer is shared by every queue worker on the same NATS: workers of several
// engines split its messages, each delivered to one of them. A call that fails is retried
// max_retries times, waiting backoff_ms × 2^(attempt-1) between tries (the message is kept in
// alive meanwhile), then moved to the dead-letter subject of its queue or topic (read it with
// queue::dlq::list {queue | topic}) and acknowledged; nothing is dropped. A job whose function is
// not registered (function_not_found) waits and is tried again every backoff without counting
// as an attempt. At most concurrency calls of one consumer run at once in one worker; messages
// of the same group run one at a time, in order, within one worker, and with concurrency 1
// (durable:subscriber's fifo) all of a consumer's messages do.
package queue

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/backoff"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/workers/condition"
	"github.com/iii-go/iii/workers/triggerkeys"
)

// Headers of a stored message.
const (
	hFunction  = "Iii-Function"
	hNamespace = "Iii-Namespace"
	hMetadata  = "Iii-Metadata"
	hGroup     = "Iii-Group"
	hError     = "Iii-Error"
	hAttempts  = "Iii-Attempts"
	hOrigin    = "Iii-Origin"
	hMessageID = "Iii-Message-Id" // a dead or redriven letter's original id (Nats-Msg-Id is cleared there)
	hConsumer  = "Iii-Consumer"   // a topic dead letter's subscriber (its durable consumer)

	metaQueue    = "iii-queue"    // consumer metadata: the queue a job consumer serves
	metaTopic    = "iii-topic"    // consumer metadata: the topic a subscriber consumer serves
	metaFunction = "iii-function" // consumer metadata: the subscriber's function
)

// Settings are the delivery settings of one queue or subscriber.
type Settings struct {
	MaxRetries  int `yaml:"max_retries" json:"max_retries"`
	BackoffMS   int `yaml:"backoff_ms" json:"backoff_ms"`
	Concurrency int `yaml:"concurrency" json:"concurrency"`
	TimeoutMS   int `yaml:"timeout_ms" json:"timeout_ms"`
}

// DuplicateWindow is how long JetStream remembers a message id: an enqueue or publish repeating
// the id within it is not stored twice.
const DuplicateWindow = 2 * time.Minute

// MaxMessageIDLen bounds a caller's message_id.
const MaxMessageIDLen = 256

// DefaultSettings are the settings of a queue or trigger that names none.
var DefaultSettings = Settings{MaxRetries: 3, BackoffMS: 1000, Concurrency: 10, TimeoutMS: 30000}

func (s Settings) or(d Settings) Settings {
	if s.MaxRetries == 0 {
		s.MaxRetries = d.MaxRetries
	}
	if s.MaxRetries < 0 {
		s.MaxRetries = 0
	}
	if s.BackoffMS <= 0 {
		s.BackoffMS = d.BackoffMS
	}
	if s.Concurrency <= 0 {
		s.Concurrency = d.Concurrency
	}
	if s.TimeoutMS <= 0 {
		s.TimeoutMS = d.TimeoutMS
	}
	return s
}

// Config is the queue worker's configuration (besides nats:).
type Config struct {
	Defaults Settings            `yaml:"defaults" json:"defaults"`
	Queues   map[string]Settings `yaml:"queues" json:"queues"`
	// RetentionHours bounds how long messages stay in the stream (default 168).
	RetentionHours int `yaml:"retention_hours" json:"retention_hours"`
	Replicas       int `yaml:"replicas" json:"replicas"`
}

// Caller runs a function through the engine.
type Caller func(ctx context.Context, fn, namespace string, data, meta json.RawMessage, timeout time.Duration) (json.RawMessage, error)

// Service is the queue worker's logic.
type Service struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	name   string // stream name
	prefix string // subject prefix iii.q.<ns>.
	ns     string // the worker's namespace
	cfg    Config
	call   Caller
	log    *slog.Logger
	ctx    context.Context

	mu   sync.Mutex
	subs map[string]*sub // by consumer name
	subT map[string]string
}

type sub struct {
	cc       jetstream.ConsumeContext
	settings Settings
	triggers int
	// stopped is set before cc.Stop: messages the client had already pulled are handed back
	// (Nak) instead of delivered to a subscriber that left.
	stopped atomic.Bool
}

func token(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b)
}

var enc = base64.RawURLEncoding

func short(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:20]
}

// Open creates (or opens) the namespace's stream.
func Open(ctx context.Context, js jetstream.JetStream, namespace string, cfg Config, call Caller, log *slog.Logger) (*Service, error) {
	cfg.Defaults = cfg.Defaults.or(DefaultSettings)
	if cfg.RetentionHours <= 0 {
		cfg.RetentionHours = 168
	}
	if cfg.Replicas < 1 {
		cfg.Replicas = 1
	}
	nsTok := token(namespace)
	s := &Service{js: js, name: "IIIQ_" + nsTok, prefix: "iii.q." + nsTok + ".", ns: namespace, cfg: cfg, call: call, log: log, ctx: ctx,
		subs: map[string]*sub{}, subT: map[string]string{}}
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: s.name, Subjects: []string{s.prefix + ">"},
		Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy, MaxAge: time.Duration(cfg.RetentionHours) * time.Hour,
		Replicas: cfg.Replicas, Duplicates: DuplicateWindow, Description: "iii queue of namespace " + namespace})
	if err != nil {
		return nil, fmt.Errorf("opening the queue stream %s: %w", s.name, err)
	}
	s.stream = st
	queues := map[string]bool{}
	for q := range cfg.Queues {
		queues[q] = true
	}
	// Queues that got jobs before (on this NATS, from any worker) resume at once: their jobs
	// outlive the worker that stored them.
	lister := st.ListConsumers(ctx)
	for ci := range lister.Info() {
		if q, ok := ci.Config.Metadata[metaQueue]; ok {
			queues[q] = true
		}
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("listing the consumers of %s: %w", s.name, err)
	}
	for q := range queues {
		if err := s.ensureJobs(q); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Service) jobSubject(q string) string { return s.prefix + "j." + enc.EncodeToString([]byte(q)) }
func (s *Service) topicSubject(t string) string {
	return s.prefix + "t." + enc.EncodeToString([]byte(t))
}
func (s *Service) dlqSubject(kind, name string) string {
	return s.prefix + "dlq." + kind + "." + enc.EncodeToString([]byte(name))
}

// redriveSubject is where a topic subscriber's redriven dead letters go: its consumer reads it
// beside the topic, so a redrive reaches the subscriber that failed and no other.
func (s *Service) redriveSubject(consumer string) string { return s.prefix + "r." + consumer }

// msgID is the id of a stored message: the original id a dead or redriven letter carries, else
// its Nats-Msg-Id.
func msgID(h nats.Header) string {
	if id := h.Get(hMessageID); id != "" {
		return id
	}
	return h.Get(jetstream.MsgIDHeader)
}

// messageID is the caller's id for a message (fn names the function for errors), or a new UUID.
func messageID(fn, id string) (string, error) {
	if id == "" {
		return uuid.NewString(), nil
	}
	if len(id) > MaxMessageIDLen {
		return "", protocol.NewError(errcode.InvalidArguments, "%s: message_id is %d bytes, the limit is %d", fn, len(id), MaxMessageIDLen)
	}
	for _, c := range []byte(id) {
		if c < 0x20 || c == 0x7f {
			return "", protocol.NewError(errcode.InvalidArguments, "%s: message_id holds a control character", fn)
		}
	}
	return id, nil
}

// receipt is the reply of enqueue and publish.
func receipt(id string, dup bool) map[string]any {
	r := map[string]any{"messageReceiptId": id, "message_id": id}
	if dup {
		r["duplicate"] = true
	}
	return r
}

// publish stores a message under id (Nats-Msg-Id); dup: JetStream already held one of that id
// within DuplicateWindow and stored nothing.
func (s *Service) publish(ctx context.Context, subject, id string, data json.RawMessage, hdr nats.Header) (dup bool, err error) {
	msg := &nats.Msg{Subject: subject, Data: data, Header: hdr}
	ack, err := s.js.PublishMsg(ctx, msg, jetstream.WithMsgID(id))
	if err != nil {
		return false, protocol.NewError(errcode.EnqueueError, "storing the message: %v", err)
	}
	return ack.Duplicate, nil
}

// withMessageID is the invocation metadata of a delivery: meta (a JSON object, or none) with
// message_id set to id. Metadata that is not an object is passed on unchanged.
func withMessageID(meta json.RawMessage, id string) json.RawMessage {
	if id == "" {
		return meta
	}
	m := map[string]json.RawMessage{}
	if len(meta) > 0 && string(meta) != "null" {
		if json.Unmarshal(meta, &m) != nil || m == nil {
			return meta
		}
	}
	m["message_id"], _ = json.Marshal(id)
	out, _ := json.Marshal(m)
	return out
}

// Enqueue stores a job (the engine's action enqueue).
func (s *Service) Enqueue(ctx context.Context, payload json.RawMessage) (any, error) {
	var in struct {
		Queue      string          `json:"queue"`
		FunctionID string          `json:"function_id"`
		Namespace  string          `json:"namespace"`
		Data       json.RawMessage `json:"data"`
		Metadata   json.RawMessage `json:"metadata"`
		Group      string          `json:"group"`
		MessageID  string          `json:"message_id"`
	}
	if err := json.Unmarshal(payload, &in); err != nil || in.Queue == "" || in.FunctionID == "" {
		return nil, protocol.NewError(errcode.InvalidArguments, "queue::enqueue needs {queue, function_id, data, message_id?}")
	}
	id, err := messageID("queue::enqueue", in.MessageID)
	if err != nil {
		return nil, err
	}
	if err := s.ensureJobs(in.Queue); err != nil {
		return nil, protocol.NewError(errcode.EnqueueError, "%v", err)
	}
	hdr := nats.Header{}
	hdr.Set(hFunction, in.FunctionID)
	if in.Namespace != "" {
		hdr.Set(hNamespace, in.Namespace)
	}
	if len(in.Metadata) > 0 && string(in.Metadata) != "null" {
		hdr.Set(hMetadata, string(in.Metadata))
	}
	if in.Group != "" {
		hdr.Set(hGroup, in.Group)
	}
	dup, err := s.publish(ctx, s.jobSubject(in.Queue), id, orNull(in.Data), hdr)
	if err != nil {
		return nil, err
	}
	return receipt(id, dup), nil
}

// Publish stores a topic message for every subscriber of the topic.
func (s *Service) Publish(ctx context.Context, payload json.RawMessage) (any, error) {
	var in struct {
		Topic     string          `json:"topic"`
		Data      json.RawMessage `json:"data"`
		Group     string          `json:"group"`
		MessageID string          `json:"message_id"`
	}
	if err := json.Unmarshal(payload, &in); err != nil || in.Topic == "" {
		return nil, protocol.NewError(errcode.InvalidArguments, "queue::publish needs {topic, data, group?, message_id?}")
	}
	id, err := messageID("queue::publish", in.MessageID)
	if err != nil {
		return nil, err
	}
	hdr := nats.Header{}
	if in.Group != "" {
		hdr.Set(hGroup, in.Group)
	}
	dup, err := s.publish(ctx, s.topicSubject(in.Topic), id, orNull(in.Data), hdr)
	if err != nil {
		return nil, err
	}
	return receipt(id, dup), nil
}

func orNull(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return json.RawMessage("null")
	}
	return v
}

// ensureJobs starts consuming queue q's jobs (once).
func (s *Service) ensureJobs(q string) error {
	name := "j_" + short(q)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subs[name] != nil {
		return nil
	}
	set := s.cfg.Queues[q].or(s.cfg.Defaults)
	sb, err := s.consume(name, []string{s.jobSubject(q)}, set, jetstream.DeliverAllPolicy, target{kind: "queue", name: q}, map[string]string{metaQueue: q})
	if err != nil {
		return err
	}
	s.subs[name] = sb
	return nil
}

// target says where a consumer's messages go: a job's own function (queue) or a subscriber's.
type target struct {
	kind       string // "queue" or "topic"
	name       string
	functionID string
	namespace  string
	metadata   json.RawMessage
	consumer   string // a subscriber's durable consumer
	condition  string // a subscriber's condition function
}

func (s *Service) consume(name string, subjects []string, set Settings, policy jetstream.DeliverPolicy, tg target, meta map[string]string) (*sub, error) {
	// A short ack wait, kept alive while a message is held (keepAlive): a worker that dies
	// leaves its messages to the others (or to itself after a restart) within seconds.
	ackWait := AckWait
	cons, err := s.stream.CreateOrUpdateConsumer(s.ctx, jetstream.ConsumerConfig{Durable: name, FilterSubjects: subjects,
		AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: policy, AckWait: ackWait, MaxAckPending: set.Concurrency * 4,
		MaxDeliver: -1, Metadata: meta})
	if err != nil {
		return nil, fmt.Errorf("creating the consumer of %s %s: %w", tg.kind, tg.name, err)
	}
	sem := make(chan struct{}, set.Concurrency)
	groups := &groupQueues{m: map[string]chan func(){}}
	sb := &sub{settings: set}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if sb.stopped.Load() {
			_ = m.Nak()
			return
		}
		stop := s.keepAlive(m)
		run := func(m jetstream.Msg) {
			sem <- struct{}{}
			defer func() { <-sem }()
			defer close(stop)
			if sb.stopped.Load() {
				_ = m.Nak()
				return
			}
			s.deliver(m, set, tg)
		}
		// A group's messages run one at a time in arrival order; with concurrency 1 (fifo)
		// every message does, as one group.
		if g := m.Headers().Get(hGroup); g != "" || set.Concurrency == 1 {
			groups.push(g, m, run)
			return
		}
		go run(m)
	}, jetstream.PullMaxMessages(set.Concurrency))
	if err != nil {
		return nil, err
	}
	sb.cc = cc
	return sb, nil
}

// groupQueues runs the messages of each group one at a time, in arrival order.
type groupQueues struct {
	mu sync.Mutex
	m  map[string]chan func()
}

func (g *groupQueues) push(group string, m jetstream.Msg, run func(jetstream.Msg)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	ch := g.m[group]
	if ch == nil {
		ch = make(chan func(), 1024)
		g.m[group] = ch
		go func() {
			for {
				select {
				case job := <-ch:
					job()
				case <-time.After(time.Minute):
					g.mu.Lock()
					if len(ch) == 0 {
						delete(g.m, group)
						g.mu.Unlock()
						return
					}
					g.mu.Unlock()
				}
			}
		}()
	}
	ch <- func() { run(m) }
}

// AckWait is how long a message may go without a sign of life from the worker holding it
// before NATS delivers it again.
const AckWait = 6 * time.Second

// keepAlive tells NATS every AckWait/3 that m is still being handled, until stop is closed.
func (s *Service) keepAlive(m jetstream.Msg) chan struct{} {
	stop := make(chan struct{})
	go func() {
		t := time.NewTicker(AckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-s.ctx.Done():
				return
			case <-t.C:
				_ = m.InProgress()
			}
		}
	}()
	return stop
}

// deliver calls the message's function and acknowledges it when that succeeds; past
// max_retries it moves the message to the dead-letter subject. A failed call is retried by
// JetStream: the message goes back with NakWithDelay for the backoff, so nothing holds it while
// it waits and a restart keeps the schedule. Two waits stay here, holding the message: while its
// function is not registered yet (which is no attempt), and in a group, whose next message must
// not overtake it. The function gets the message's id as message_id in the invocation metadata,
// the same on every delivery.
func (s *Service) deliver(m jetstream.Msg, set Settings, tg target) {
	fn, ns, meta := tg.functionID, tg.namespace, tg.metadata
	if tg.kind == "queue" {
		fn, ns = m.Headers().Get(hFunction), m.Headers().Get(hNamespace)
		if h := m.Headers().Get(hMetadata); h != "" {
			meta = json.RawMessage(h)
		}
	}
	meta = withMessageID(meta, msgID(m.Headers()))
	attempts := 0
	if md, err := m.Metadata(); err == nil && md.NumDelivered > 1 {
		attempts = int(md.NumDelivered) - 1 // tries made before a restart (at least one each)
	}
	timeout := time.Duration(set.TimeoutMS) * time.Millisecond
	for {
		run, err := s.passes(tg, ns, m.Data(), timeout)
		if err == nil && run {
			_, err = s.call(s.ctx, fn, ns, m.Data(), meta, timeout)
		}
		if err == nil {
			if aerr := m.DoubleAck(s.ctx); aerr != nil && s.ctx.Err() == nil {
				s.log.Warn("acknowledging a message", "err", aerr)
			}
			return
		}
		if s.ctx.Err() != nil {
			return // stopping: redelivered after the restart
		}
		var pe *protocol.Error
		waiting := errors.As(err, &pe) && (pe.Code == errcode.FunctionNotFound || pe.Code == errcode.NotConnected)
		if !waiting {
			attempts++
		}
		if attempts > set.MaxRetries {
			s.deadLetter(m, tg, fn, err, attempts)
			return
		}
		delay := time.Duration(set.BackoffMS) * time.Millisecond
		if !waiting {
			delay = backoff.Backoff{Initial: delay, Max: 5 * time.Minute}.Delay(attempts)
			if m.Headers().Get(hGroup) == "" {
				if err := m.NakWithDelay(delay); err != nil {
					s.log.Warn("handing a message back for its retry", "err", err)
				}
				return
			}
		}
		if !s.sleep(min(delay, 5*time.Minute)) {
			return
		}
	}
}

// passes asks a subscriber's condition function, if it has one, about a message's data, as
// iii's queue does: an answer of false means the message is done without the handler; a failed
// call is a failed attempt (retried, then dead-lettered); any other answer runs the handler.
func (s *Service) passes(tg target, ns string, data json.RawMessage, timeout time.Duration) (bool, error) {
	if tg.condition == "" {
		return true, nil
	}
	res, err := s.call(s.ctx, tg.condition, ns, data, nil, timeout)
	if err != nil {
		return false, fmt.Errorf("condition function %s: %w", tg.condition, err)
	}
	return condition.Allows(res), nil
}

// sleep waits d; false when the worker stops.
func (s *Service) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (s *Service) deadLetter(m jetstream.Msg, tg target, fn string, cause error, attempts int) {
	hdr := nats.Header{}
	for k, v := range m.Headers() {
		hdr[k] = v
	}
	if id := msgID(hdr); id != "" {
		hdr.Set(hMessageID, id)
	}
	hdr.Del(jetstream.MsgIDHeader) // else the dead letter is dropped as a duplicate of the original
	hdr.Set(hFunction, fn)
	if tg.consumer != "" {
		hdr.Set(hConsumer, tg.consumer)
	}
	hdr.Set(hError, string(protocol.AsError(cause).Raw()))
	hdr.Set(hAttempts, strconv.Itoa(attempts))
	if md, err := m.Metadata(); err == nil {
		hdr.Set(hOrigin, strconv.FormatUint(md.Sequence.Stream, 10))
	}
	if _, err := s.js.PublishMsg(s.ctx, &nats.Msg{Subject: s.dlqSubject(tg.kind, tg.name), Data: m.Data(), Header: hdr}); err != nil {
		s.log.Warn("moving a message to the dead-letter queue failed; it will be delivered again", "err", err)
		_ = m.Nak()
		return
	}
	s.log.Info("message moved to the dead-letter queue", tg.kind, tg.name, "function_id", fn, "attempts", attempts)
	_ = m.DoubleAck(s.ctx)
}

// DLQ lists the dead-letter messages of {queue} or {topic}.
func (s *Service) DLQ(ctx context.Context, payload json.RawMessage) (any, error) {
	var in struct{ Queue, Topic string }
	_ = json.Unmarshal(payload, &in)
	kind, name := "queue", in.Queue
	if in.Topic != "" {
		kind, name = "topic", in.Topic
	}
	if name == "" {
		return nil, protocol.NewError(errcode.InvalidArguments, "queue::dlq::list needs {queue} or {topic}")
	}
	oc, err := s.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{s.dlqSubject(kind, name)}})
	if err != nil {
		return nil, err
	}
	info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(s.dlqSubject(kind, name)))
	if err != nil {
		return nil, err
	}
	total := 0
	for _, n := range info.State.Subjects {
		total += int(n)
	}
	type row struct {
		FunctionID string          `json:"function_id"`
		Data       json.RawMessage `json:"data"`
		Error      json.RawMessage `json:"error"`
		Attempts   int             `json:"attempts"`
		Group      string          `json:"group,omitempty"`
		MessageID  string          `json:"message_id,omitempty"`
	}
	rows := []row{}
	for len(rows) < total && len(rows) < 1000 {
		batch, err := oc.Fetch(min(total-len(rows), 100), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			a, _ := strconv.Atoi(m.Headers().Get(hAttempts))
			rows = append(rows, row{FunctionID: m.Headers().Get(hFunction), Data: json.RawMessage(m.Data()),
				Error: json.RawMessage(m.Headers().Get(hError)), Attempts: a, Group: m.Headers().Get(hGroup),
				MessageID: m.Headers().Get(hMessageID)})
		}
		if n == 0 {
			break
		}
	}
	return map[string]any{"messages": rows, "count": len(rows)}, nil
}

// RegisterTrigger subscribes a function to a topic: config {topic, max_retries?, backoff_ms?,
// concurrency?, timeout_ms?, condition_function_id?}.
// A Service is the provider of its trigger type.
var _ protocol.TriggerHandler = (*Service)(nil)

func (s *Service) RegisterTrigger(_ context.Context, t protocol.Trigger) error {
	if err := triggerkeys.Check("queue", t.Config, "topic", "queue", "max_retries", "backoff_ms", "concurrency", "timeout_ms", "condition_function_id"); err != nil {
		return err
	}
	var cfg struct {
		Topic     string `json:"topic"`
		Queue     string `json:"queue"` // the 0.22 durable:subscriber alias
		Condition string `json:"condition_function_id"`
		Settings
	}
	if err := json.Unmarshal(t.Config, &cfg); err != nil {
		return protocol.NewError(errcode.InvalidArguments, "queue trigger config must be {topic, max_retries?, backoff_ms?, concurrency?}: %v", err)
	}
	if cfg.Topic == "" {
		cfg.Topic = cfg.Queue
	}
	if cfg.Topic == "" {
		return protocol.NewError(errcode.InvalidArguments, "queue trigger config needs a topic")
	}
	parts := []string{cfg.Topic, t.FunctionID, t.Namespace}
	if cfg.Condition != "" { // a subscriber with its own condition is a subscriber of its own
		parts = append(parts, cfg.Condition)
	}
	name := "t_" + short(parts...)
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.subs[name]; sb != nil {
		sb.triggers++
		s.subT[t.ID] = name
		return nil
	}
	sb, err := s.consume(name, []string{s.topicSubject(cfg.Topic), s.redriveSubject(name)}, cfg.Settings.or(s.cfg.Defaults), jetstream.DeliverNewPolicy,
		target{kind: "topic", name: cfg.Topic, functionID: t.FunctionID, namespace: t.Namespace, metadata: t.Metadata, consumer: name, condition: cfg.Condition},
		map[string]string{metaTopic: cfg.Topic, metaFunction: t.FunctionID})
	if err != nil {
		return err
	}
	sb.triggers = 1
	s.subs[name] = sb
	s.subT[t.ID] = name
	return nil
}

// UnregisterTrigger stops delivering to the trigger's function (its durable consumer stays, so
// messages published meanwhile wait for the subscriber's return).
func (s *Service) UnregisterTrigger(_ context.Context, t protocol.Trigger) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	name := s.subT[t.ID]
	delete(s.subT, t.ID)
	if sb := s.subs[name]; sb != nil {
		sb.triggers--
		if sb.triggers <= 0 {
			sb.stopped.Store(true)
			sb.cc.Stop()
			delete(s.subs, name)
		}
	}
	return nil
}

// Close stops every consumer.
func (s *Service) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sb := range s.subs {
		sb.stopped.Store(true)
		sb.cc.Stop()
	}
}
