package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// iii's queue administration functions, with iii's ids, requests and answers; its console
// calls them. The engine::queue::* ones only read; the iii::queue::* ones move or delete dead
// letters. A name is a job queue's and a topic's alike: a function acts on both the queue and
// the topic of that name (iii resolves a name to one of them; here a job queue and a topic of
// the same name are both meant).
const (
	ListTopics     = "engine::queue::list_topics"
	TopicStats     = "engine::queue::topic_stats"
	DLQTopics      = "engine::queue::dlq_topics"
	DLQMessages    = "engine::queue::dlq_messages"
	Redrive        = "iii::queue::redrive"
	RedriveMessage = "iii::queue::redrive_message"
	DiscardMessage = "iii::queue::discard_message"
)

// brokerTopic is the broker_type of a topic in list_topics and dlq_topics; job queues are
// "function_queue", as in iii.
const brokerTopic = "jetstream"

// Handler is a function the worker registers.
type Handler = func(context.Context, json.RawMessage) (any, error)

// Functions are the functions the worker registers in namespace ns: its own, iii's names of
// them and iii's administration functions. iii fixes its engine::queue::* ids in default; the
// engine refuses engine::* ids elsewhere, so in another namespace they are left out and named
// in skipped (the iii::queue::* ones are registered in every namespace).
func (s *Service) Functions(ns string) (fns map[string]Handler, skipped []string) {
	fns = map[string]Handler{
		"queue::enqueue": s.Enqueue, "queue::publish": s.Publish, "queue::dlq::list": s.DLQ,
		DurablePublish: s.Publish,
		Redrive:        s.RedriveAll, RedriveMessage: s.RedriveOne, DiscardMessage: s.Discard,
	}
	engine := map[string]Handler{ListTopics: s.ListTopics, TopicStats: s.TopicStats, DLQTopics: s.DLQTopics, DLQMessages: s.DLQMessages}
	for id, h := range engine {
		if ns == protocol.DefaultNamespace {
			fns[id] = h
		} else {
			skipped = append(skipped, id)
		}
	}
	slices.Sort(skipped)
	return fns, skipped
}

// names reads the request's name: field (or its alias) as iii's serde does; a missing or
// empty name is INVALID_ARGUMENTS naming the function and the field.
func names(fn string, payload json.RawMessage, field, alias string, idToo bool) (name, id string, err error) {
	var in map[string]json.RawMessage
	if len(payload) > 0 && string(payload) != "null" {
		if json.Unmarshal(payload, &in) != nil {
			return "", "", protocol.NewError(errcode.InvalidArguments, "%s: the request must be an object {%s%s}", fn, field, map[bool]string{true: ", message_id"}[idToo])
		}
	}
	str := func(k string) (string, error) {
		v, ok := in[k]
		if !ok || string(v) == "null" {
			return "", nil
		}
		var s string
		if json.Unmarshal(v, &s) != nil {
			return "", protocol.NewError(errcode.InvalidArguments, "%s: %s must be a string, got %s", fn, k, v)
		}
		return s, nil
	}
	if name, err = str(field); err != nil {
		return "", "", err
	}
	if name == "" {
		if name, err = str(alias); err != nil {
			return "", "", err
		}
	}
	if name == "" {
		return "", "", protocol.NewError(errcode.InvalidArguments, "%s: %s is required", fn, field)
	}
	if idToo {
		if id, err = str("message_id"); err != nil {
			return "", "", err
		}
		if id == "" {
			return "", "", protocol.NewError(errcode.InvalidArguments, "%s: message_id is required", fn)
		}
	}
	return name, id, nil
}

func storeErr(fn string, err error) error {
	return protocol.NewError(errcode.EnqueueError, "%s: the queue store failed: %v", fn, err)
}

// topicRow is an entry of list_topics.
type topicRow struct {
	Name            string `json:"name"`
	BrokerType      string `json:"broker_type"`
	SubscriberCount uint64 `json:"subscriber_count"`
}

// inventory is what the stream knows of its queues and topics: every job queue (configured,
// with a consumer, or with stored jobs or dead letters) and every topic (with a subscriber,
// stored messages or dead letters), with the topics' durable subscribers.
type inventory struct {
	queues map[string]bool
	topics map[string]uint64 // topic -> durable subscribers
	cons   []*jetstream.ConsumerInfo
	dlq    map[string]uint64 // dlq subject -> dead letters
}

func (s *Service) inventory(ctx context.Context) (*inventory, error) {
	inv := &inventory{queues: map[string]bool{}, topics: map[string]uint64{}, dlq: map[string]uint64{}}
	for q := range s.cfg.Queues {
		inv.queues[q] = true
	}
	lister := s.stream.ListConsumers(ctx)
	for ci := range lister.Info() {
		inv.cons = append(inv.cons, ci)
		if q, ok := ci.Config.Metadata[metaQueue]; ok {
			inv.queues[q] = true
		}
		if t, ok := ci.Config.Metadata[metaTopic]; ok {
			inv.topics[t]++
		}
	}
	if err := lister.Err(); err != nil {
		return nil, err
	}
	info, err := s.stream.Info(ctx, jetstream.WithSubjectFilter(s.prefix+">"))
	if err != nil {
		return nil, err
	}
	for subj, n := range info.State.Subjects {
		rest := strings.TrimPrefix(subj, s.prefix)
		kind, b64, _ := strings.Cut(rest, ".")
		if kind == "dlq" {
			inv.dlq[subj] = n
			kind, b64, _ = strings.Cut(b64, ".")
			kind = map[string]string{"queue": "j", "topic": "t"}[kind]
		}
		raw, err := enc.DecodeString(b64)
		if err != nil {
			continue
		}
		switch kind {
		case "j":
			inv.queues[string(raw)] = true
		case "t":
			if _, ok := inv.topics[string(raw)]; !ok {
				inv.topics[string(raw)] = 0
			}
		}
	}
	return inv, nil
}

// dlqCount is the number of dead letters of the queue and the topic named name.
func (inv *inventory) dlqCount(s *Service, name string) uint64 {
	return inv.dlq[s.dlqSubject("queue", name)] + inv.dlq[s.dlqSubject("topic", name)]
}

// ListTopics is engine::queue::list_topics: [{name, broker_type, subscriber_count}], job queues
// as broker_type function_queue with their concurrency as subscriber_count (as iii), topics as
// jetstream with their durable subscribers.
func (s *Service) ListTopics(ctx context.Context, _ json.RawMessage) (any, error) {
	inv, err := s.inventory(ctx)
	if err != nil {
		return nil, storeErr(ListTopics, err)
	}
	rows := []topicRow{}
	for q := range inv.queues {
		rows = append(rows, topicRow{Name: q, BrokerType: "function_queue", SubscriberCount: uint64(s.settings(q).Concurrency)})
	}
	for t, n := range inv.topics {
		rows = append(rows, topicRow{Name: t, BrokerType: brokerTopic, SubscriberCount: n})
	}
	slices.SortFunc(rows, func(a, b topicRow) int {
		return strings.Compare(a.Name+"\x00"+a.BrokerType, b.Name+"\x00"+b.BrokerType)
	})
	return rows, nil
}

func (s *Service) settings(q string) Settings { return s.cfg.Queues[q].or(s.cfg.Defaults) }

// TopicStats is engine::queue::topic_stats {topic | queue}: {depth, consumer_count, dlq_depth,
// config}. depth counts the messages not yet done (waiting, in flight or waiting for a retry) of
// the queue's consumer and of each subscriber of the topic; consumer_count is the queue's
// concurrency (as iii) plus the topic's durable subscribers; config is the queue's settings, or
// null for a topic alone.
func (s *Service) TopicStats(ctx context.Context, payload json.RawMessage) (any, error) {
	name, _, err := names(TopicStats, payload, "topic", "queue", false)
	if err != nil {
		return nil, err
	}
	inv, err := s.inventory(ctx)
	if err != nil {
		return nil, storeErr(TopicStats, err)
	}
	var depth, consumers uint64
	var config any
	if inv.queues[name] {
		set := s.settings(name)
		consumers += uint64(set.Concurrency)
		config = set
	}
	for _, ci := range inv.cons {
		if ci.Config.Metadata[metaQueue] == name || ci.Config.Metadata[metaTopic] == name {
			depth += ci.NumPending + uint64(ci.NumAckPending)
		}
		if ci.Config.Metadata[metaTopic] == name {
			consumers++
		}
	}
	return map[string]any{"depth": depth, "consumer_count": consumers, "dlq_depth": inv.dlqCount(s, name), "config": config}, nil
}

// DLQTopics is engine::queue::dlq_topics: [{topic, broker_type, message_count}] for every job
// queue and topic, with its dead letters (0 when none), as iii lists them.
func (s *Service) DLQTopics(ctx context.Context, _ json.RawMessage) (any, error) {
	inv, err := s.inventory(ctx)
	if err != nil {
		return nil, storeErr(DLQTopics, err)
	}
	type row struct {
		Topic        string `json:"topic"`
		BrokerType   string `json:"broker_type"`
		MessageCount uint64 `json:"message_count"`
	}
	rows := []row{}
	for q := range inv.queues {
		rows = append(rows, row{q, "function_queue", inv.dlq[s.dlqSubject("queue", q)]})
	}
	for t := range inv.topics {
		rows = append(rows, row{t, brokerTopic, inv.dlq[s.dlqSubject("topic", t)]})
	}
	slices.SortFunc(rows, func(a, b row) int { return strings.Compare(a.Topic+"\x00"+a.BrokerType, b.Topic+"\x00"+b.BrokerType) })
	return rows, nil
}

// deadLetter is one stored dead letter.
type deadLetter struct {
	kind string // queue or topic
	msg  *jetstream.RawStreamMsg
}

func (d deadLetter) id() string {
	if id := msgID(d.msg.Header); id != "" {
		return id
	}
	return "seq-" + strconv.FormatUint(d.msg.Sequence, 10)
}

// maxScan bounds how many dead letters one call reads.
const maxScan = 10000

// deadLetters reads the dead letters of the queue and the topic named name, oldest first, up to
// the stream's last message when the call began (a letter that fails again meanwhile is not
// met twice).
func (s *Service) deadLetters(ctx context.Context, name string) ([]deadLetter, error) {
	info, err := s.stream.Info(ctx)
	if err != nil {
		return nil, err
	}
	last := info.State.LastSeq
	var out []deadLetter
	for _, kind := range []string{"queue", "topic"} {
		subj := s.dlqSubject(kind, name)
		for seq := uint64(1); seq <= last && len(out) < maxScan; {
			m, err := s.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subj))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				return nil, err
			}
			if m.Sequence > last {
				break
			}
			out = append(out, deadLetter{kind: kind, msg: m})
			seq = m.Sequence + 1
		}
	}
	return out, nil
}

// DLQMessages is engine::queue::dlq_messages {topic | queue, offset?: 0, limit?: 50}: the dead
// letters of the queue and topic of that name, newest first, as iii's [{id, payload, error,
// failed_at (Unix seconds), retries, size_bytes}]. id is the message's id (its message_id), the
// one redrive_message and discard_message take.
func (s *Service) DLQMessages(ctx context.Context, payload json.RawMessage) (any, error) {
	name, _, err := names(DLQMessages, payload, "topic", "queue", false)
	if err != nil {
		return nil, err
	}
	var page struct {
		Offset *int64 `json:"offset"`
		Limit  *int64 `json:"limit"`
	}
	if err := json.Unmarshal(payload, &page); err != nil {
		return nil, protocol.NewError(errcode.InvalidArguments, "%s: offset and limit must be whole numbers: %v", DLQMessages, err)
	}
	offset, limit := int64(0), int64(50)
	if page.Offset != nil {
		offset = *page.Offset
	}
	if page.Limit != nil {
		limit = *page.Limit
	}
	if offset < 0 || limit < 0 {
		return nil, protocol.NewError(errcode.InvalidArguments, "%s: offset and limit must not be negative", DLQMessages)
	}
	all, err := s.deadLetters(ctx, name)
	if err != nil {
		return nil, storeErr(DLQMessages, err)
	}
	slices.SortStableFunc(all, func(a, b deadLetter) int { return b.msg.Time.Compare(a.msg.Time) }) // newest first
	type row struct {
		ID        string          `json:"id"`
		Payload   json.RawMessage `json:"payload"`
		Error     string          `json:"error"`
		FailedAt  uint64          `json:"failed_at"`
		Retries   uint32          `json:"retries"`
		SizeBytes uint64          `json:"size_bytes"`
	}
	rows := []row{}
	for i := offset; i < int64(len(all)) && int64(len(rows)) < limit; i++ {
		d := all[i]
		retries, _ := strconv.ParseUint(d.msg.Header.Get(hAttempts), 10, 32)
		rows = append(rows, row{ID: d.id(), Payload: orNull(d.msg.Data), Error: errorText(d.msg.Header.Get(hError)),
			FailedAt: uint64(max(d.msg.Time.Unix(), 0)), Retries: uint32(retries), SizeBytes: uint64(len(d.msg.Data))})
	}
	return rows, nil
}

// errorText is the message of a stored error body ({code, message}), as iii's string.
func errorText(raw string) string {
	var e struct{ Code, Message string }
	if json.Unmarshal([]byte(raw), &e) == nil && (e.Code != "" || e.Message != "") {
		if e.Code == "" {
			return e.Message
		}
		return e.Code + ": " + e.Message
	}
	if raw == "" {
		return "unknown"
	}
	return raw
}

// redrive moves a dead letter back for delivery, with its attempts reset: a job to its queue, a
// topic message to the subscriber that failed on it (no other subscriber gets it again). The id
// travels as Iii-Message-Id, not Nats-Msg-Id, which JetStream would drop as a duplicate of the
// original within its window. It is stored before the dead letter is deleted: at worst a crash
// in between leaves both, never neither.
func (s *Service) redrive(ctx context.Context, name string, d deadLetter) error {
	hdr := nats.Header{}
	for k, v := range d.msg.Header {
		switch k {
		case hError, hAttempts, hOrigin, hConsumer, jetstream.MsgIDHeader:
		default:
			hdr[k] = v
		}
	}
	hdr.Set(hMessageID, d.id())
	subject := s.jobSubject(name)
	if d.kind == "topic" {
		cons := d.msg.Header.Get(hConsumer)
		if cons == "" { // a dead letter stored before subscribers were recorded
			cons = "t_" + short(name, d.msg.Header.Get(hFunction), s.ns)
		}
		subject = s.redriveSubject(cons)
		hdr.Del(hFunction)
	} else if err := s.ensureJobs(name); err != nil {
		return err
	}
	if _, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: d.msg.Data, Header: hdr}); err != nil {
		return err
	}
	return s.stream.DeleteMsg(ctx, d.msg.Sequence)
}

// RedriveAll is iii::queue::redrive {queue | topic}: every dead letter of the queue and topic of
// that name goes back for delivery; answers {queue, redriven}.
func (s *Service) RedriveAll(ctx context.Context, payload json.RawMessage) (any, error) {
	name, _, err := names(Redrive, payload, "queue", "topic", false)
	if err != nil {
		return nil, err
	}
	all, err := s.deadLetters(ctx, name)
	if err != nil {
		return nil, storeErr(Redrive, err)
	}
	n := 0
	for _, d := range all {
		if err := s.redrive(ctx, name, d); err != nil {
			return nil, storeErr(Redrive, fmt.Errorf("after %d of %d redriven: %w", n, len(all), err))
		}
		n++
	}
	if n > 0 {
		s.log.Info("dead letters redriven", "queue", name, "redriven", n)
	}
	return map[string]any{"queue": name, "redriven": n}, nil
}

// RedriveOne is iii::queue::redrive_message {queue | topic, message_id}: the dead letters of
// that id (one per subscriber that failed on it) go back for delivery; answers {queue,
// message_id, redriven} with redriven 0 when there is none, as iii.
func (s *Service) RedriveOne(ctx context.Context, payload json.RawMessage) (any, error) {
	return s.each(ctx, RedriveMessage, payload, func(name string, d deadLetter) error { return s.redrive(ctx, name, d) })
}

// Discard is iii::queue::discard_message {queue | topic, message_id}: deletes the dead letters
// of that id; answers {queue, message_id, redriven} (iii's field name) with the number deleted.
func (s *Service) Discard(ctx context.Context, payload json.RawMessage) (any, error) {
	return s.each(ctx, DiscardMessage, payload, func(_ string, d deadLetter) error { return s.stream.DeleteMsg(ctx, d.msg.Sequence) })
}

func (s *Service) each(ctx context.Context, fn string, payload json.RawMessage, do func(string, deadLetter) error) (any, error) {
	name, id, err := names(fn, payload, "queue", "topic", true)
	if err != nil {
		return nil, err
	}
	all, err := s.deadLetters(ctx, name)
	if err != nil {
		return nil, storeErr(fn, err)
	}
	n := 0
	for _, d := range all {
		if d.id() != id {
			continue
		}
		if err := do(name, d); err != nil {
			return nil, storeErr(fn, err)
		}
		n++
	}
	s.log.Info("dead letter handled", "function", fn, "queue", name, "message_id", id, "count", n)
	return map[string]any{"queue": name, "message_id": id, "redriven": n}, nil
}
