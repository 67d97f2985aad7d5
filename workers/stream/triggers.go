package stream

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/workers/triggerkeys"
)

// A Service is the provider of the stream trigger type.
var _ protocol.TriggerHandler = (*Service)(nil)

// RegisterTrigger adds a stream trigger: config {stream_name, group_id?, item_id?,
// condition_function_id?}.
func (s *Service) RegisterTrigger(_ context.Context, t protocol.Trigger) error {
	if err := triggerkeys.Check(TriggerType, t.Config, "stream_name", "group_id", "item_id", "condition_function_id"); err != nil {
		return err
	}
	var cfg TriggerConfig
	if len(t.Config) > 0 && string(t.Config) != "null" {
		if err := json.Unmarshal(t.Config, &cfg); err != nil {
			return protocol.NewError(errcode.InvalidArguments, "stream trigger config must be {stream_name, group_id?, item_id?, condition_function_id?}: %v", err)
		}
	}
	if cfg.StreamName == "" {
		return protocol.NewError(errcode.InvalidArguments, "stream trigger config needs a stream_name")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.triggers[t.ID] = streamTrigger{t: t, cfg: cfg, q: &queue{}}
	return nil
}

// UnregisterTrigger removes a stream trigger.
func (s *Service) UnregisterTrigger(_ context.Context, t protocol.Trigger) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.triggers, t.ID)
	return nil
}

// JoinLeave is the provider of stream:join (Join true) or stream:leave triggers of a Service:
// any config; the function gets {subscription_id, stream_name, group_id, id, context} when a
// WebSocket client joins (leaves) a stream, and a join function answering {unauthorized: true}
// refuses the join.
type JoinLeave struct {
	Svc  *Service
	Join bool
}

func (j JoinLeave) set() map[string]protocol.Trigger {
	if j.Join {
		return j.Svc.joins
	}
	return j.Svc.leaves
}

// RegisterTrigger adds the trigger.
func (j JoinLeave) RegisterTrigger(_ context.Context, t protocol.Trigger) error {
	kind := LeaveTriggerType
	if j.Join {
		kind = JoinTriggerType
	}
	if err := triggerkeys.Check(kind, t.Config); err != nil {
		return err
	}
	j.Svc.mu.Lock()
	defer j.Svc.mu.Unlock()
	j.set()[t.ID] = t
	return nil
}

// UnregisterTrigger removes the trigger.
func (j JoinLeave) UnregisterTrigger(_ context.Context, t protocol.Trigger) error {
	j.Svc.mu.Lock()
	defer j.Svc.mu.Unlock()
	delete(j.set(), t.ID)
	return nil
}

// JoinEvent is what stream:join and stream:leave functions get.
type JoinEvent struct {
	SubscriptionID string          `json:"subscription_id"`
	StreamName     string          `json:"stream_name"`
	GroupID        string          `json:"group_id"`
	ID             *string         `json:"id"`
	Context        json.RawMessage `json:"context"`
}

// joinLeave calls the join (or leave) functions with ev, in trigger id order, and reports
// whether one of the join functions answered {unauthorized: true}.
func (s *Service) joinLeave(ctx context.Context, join bool, ev JoinEvent) (unauthorized bool) {
	s.mu.Lock()
	set := s.leaves
	if join {
		set = s.joins
	}
	ts := make([]protocol.Trigger, 0, len(set))
	for _, t := range set {
		ts = append(ts, t)
	}
	s.mu.Unlock()
	if s.call == nil {
		return false
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].ID < ts[j].ID })
	ev.Context = orNull(ev.Context)
	for _, t := range ts {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		res, err := s.call.Call(cctx, t.FunctionID, ev, t.CallOptions()...)
		cancel()
		if err != nil {
			s.logf("a stream join/leave function failed", "trigger_id", t.ID, "function_id", t.FunctionID, "err", err)
			continue
		}
		var r struct {
			Unauthorized bool `json:"unauthorized"`
		}
		if join && json.Unmarshal(res, &r) == nil && r.Unauthorized {
			unauthorized = true
		}
	}
	return unauthorized
}

// fire queues m for each trigger it matches; each trigger's queue is delivered in the background,
// in order.
func (s *Service) fire(m Message) {
	item := ""
	if m.ID != nil {
		item = *m.ID
	}
	if s.call == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.triggers {
		c := st.cfg
		if c.StreamName != m.StreamName || (c.GroupID != "" && c.GroupID != m.GroupID) || (c.ItemID != "" && c.ItemID != item) {
			continue
		}
		st.q.mu.Lock()
		if len(st.q.pending) >= MaxPending {
			s.logf("stream trigger too far behind; change dropped", "trigger_id", st.t.ID, "function_id", st.t.FunctionID, "pending", MaxPending)
			st.q.mu.Unlock()
			continue
		}
		st.q.pending = append(st.q.pending, m)
		if !st.q.running {
			st.q.running = true
			go s.drain(st)
		}
		st.q.mu.Unlock()
	}
}

// drain delivers a trigger's queue until it is empty.
func (s *Service) drain(st streamTrigger) {
	timeout := s.CallTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	for {
		st.q.mu.Lock()
		if len(st.q.pending) == 0 {
			st.q.running = false
			st.q.mu.Unlock()
			return
		}
		m := st.q.pending[0]
		st.q.pending = st.q.pending[1:]
		st.q.mu.Unlock()
		s.deliver(st, m, timeout)
	}
}

func (s *Service) deliver(st streamTrigger, m Message, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if c := st.cfg.ConditionFunctionID; c != "" {
		res, err := s.call.Call(ctx, c, m, st.t.CallOptions()...)
		if err != nil {
			s.logf("stream trigger condition failed; handler skipped", "trigger_id", st.t.ID, "condition_function_id", c, "err", err)
			return
		}
		if strings.TrimSpace(string(res)) == "false" {
			return
		}
	}
	if _, err := s.call.Call(ctx, st.t.FunctionID, m, st.t.CallOptions()...); err != nil {
		s.logf("delivering a stream change", "trigger_id", st.t.ID, "function_id", st.t.FunctionID, "err", err)
	}
}

func (s *Service) logf(msg string, args ...any) {
	if s.Log != nil {
		s.Log(msg, args...)
	}
}
