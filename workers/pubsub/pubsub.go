// Package pubsub is the pubsub worker, as iii's iii-pubsub: the function publish {topic, data}
// and the trigger type subscribe {topic}, on core NATS subjects (no JetStream). Every subscribe
// trigger of a topic gets each message published to it from then on, as the raw data (no
// envelope). Delivery is at most once, fire-and-forget: nothing is stored, a message published
// while no trigger is subscribed is gone, and a failed call is logged, not retried (use the
// queue worker's durable topics for retries). Workers of several engines on one NATS cluster
// share the subjects of a namespace, so a publish reaches the subscribers of all of them.
package pubsub

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/workers/triggerkeys"
)

// Function and trigger type names, as iii's.
const (
	FunctionPublish = "publish"
	TriggerType     = "subscribe"
)

// CodePublishError: NATS did not take a published message.
const CodePublishError = "PUBSUB_ERROR"

// MaxInFlight bounds the calls one subscription runs at once; past it the subscription waits and
// NATS buffers (and, past its pending limit, drops: at most once).
const MaxInFlight = 64

// Fire delivers a message's data to a trigger's function.
type Fire func(t protocol.Trigger, data json.RawMessage)

// Service is the pubsub worker's logic on one NATS connection.
type Service struct {
	nc     *nats.Conn
	prefix string // iii.ps.<namespace>.
	fire   Fire

	mu   sync.Mutex
	subs map[string]*nats.Subscription // by trigger id
}

// New serves the namespace's topics on nc.
func New(nc *nats.Conn, namespace string, fire Fire) *Service {
	b := []byte(namespace)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			b[i] = '_'
		}
	}
	return &Service{nc: nc, prefix: "iii.ps." + string(b) + ".", fire: fire, subs: map[string]*nats.Subscription{}}
}

func (s *Service) subject(topic string) string {
	return s.prefix + base64.RawURLEncoding.EncodeToString([]byte(topic))
}

// Publish sends {topic, data} to every subscriber of topic; it answers null.
func (s *Service) Publish(_ context.Context, payload json.RawMessage) (any, error) {
	var in struct {
		Topic string          `json:"topic"`
		Data  json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(payload, &in); err != nil || in.Topic == "" {
		return nil, protocol.NewError(errcode.InvalidArguments, "publish needs {topic, data}")
	}
	data := in.Data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	if err := s.nc.Publish(s.subject(in.Topic), data); err != nil {
		return nil, protocol.NewError(CodePublishError, "publishing to %s: %v", in.Topic, err)
	}
	// Flushed before the answer, so a publish that returned has left this process.
	if err := s.nc.Flush(); err != nil {
		return nil, protocol.NewError(CodePublishError, "publishing to %s: %v", in.Topic, err)
	}
	return nil, nil
}

// A Service is the provider of the subscribe trigger type.
var _ protocol.TriggerHandler = (*Service)(nil)

// RegisterTrigger subscribes the trigger's function to config {topic}.
func (s *Service) RegisterTrigger(_ context.Context, t protocol.Trigger) error {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(t.Config, &cfg); err != nil || cfg == nil {
		return protocol.NewError(errcode.InvalidArguments, "subscribe trigger config must be {topic}")
	}
	if err := triggerkeys.Check(TriggerType, t.Config, "topic"); err != nil {
		return err
	}
	var topic string
	_ = json.Unmarshal(cfg["topic"], &topic)
	if topic == "" {
		return protocol.NewError(errcode.InvalidArguments, "subscribe trigger config needs a topic (a string)")
	}
	sem := make(chan struct{}, MaxInFlight)
	sub, err := s.nc.Subscribe(s.subject(topic), func(m *nats.Msg) {
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			s.fire(t, json.RawMessage(m.Data))
		}()
	})
	if err != nil {
		return fmt.Errorf("subscribing to %s: %w", topic, err)
	}
	if err := s.nc.Flush(); err != nil { // the subscription is live before the trigger counts as registered
		_ = sub.Unsubscribe()
		return fmt.Errorf("subscribing to %s: %w", topic, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.subs[t.ID]; old != nil {
		_ = old.Unsubscribe()
	}
	s.subs[t.ID] = sub
	return nil
}

// UnregisterTrigger ends the trigger's subscription.
func (s *Service) UnregisterTrigger(_ context.Context, t protocol.Trigger) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sub := s.subs[t.ID]; sub != nil {
		_ = sub.Unsubscribe()
		delete(s.subs, t.ID)
	}
	return nil
}

// Close ends every subscription.
func (s *Service) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, sub := range s.subs {
		_ = sub.Unsubscribe()
		delete(s.subs, id)
	}
}
