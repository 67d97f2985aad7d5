// Package cron is the cron worker: the "cron" trigger type, config {expression}, with seconds,
// as iii's cron worker takes it.
//
// An expression has 6 fields (second minute hour day-of-month month day-of-week) or 7 (plus a
// year: *, a number, a range a-b or a list of those), or a descriptor such as @every 5s or
// @daily. A bad one refuses the trigger with INVALID_CRON_EXPRESSION. At each tick the worker
// calls the bound function with {trigger: "cron", job_id, scheduled_time, actual_time} (RFC
// 3339, UTC) and the trigger's metadata. With condition_function_id in the config the claimed
// tick first calls that function, in the trigger's namespace, with the same tick, as iii's: an
// answer of false skips the handler, a failed call skips it too (logged), any other answer (null
// included) lets it fire.
//
// One tick fires once across every cron worker on the same NATS: before firing, a worker
// creates the key <job>.<tick> in a JetStream key-value bucket (iii-cron-<namespace>, entries
// expire after an hour); only the worker whose create succeeds fires. The job is the bound
// function, its namespace and the expression, so the same trigger registered on two engines is
// one job.
package cron

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	robfig "github.com/robfig/cron/v3"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/workers/condition"
	"github.com/iii-go/iii/workers/triggerkeys"
)

// CodeInvalidExpression refuses a trigger whose expression does not parse.
const CodeInvalidExpression = "INVALID_CRON_EXPRESSION"

// Tick is what a cron trigger's function receives.
type Tick struct {
	Trigger       string `json:"trigger"`
	JobID         string `json:"job_id"`
	ScheduledTime string `json:"scheduled_time"`
	ActualTime    string `json:"actual_time"`
}

// Fire delivers a tick.
type Fire func(t protocol.Trigger, tick Tick)

// Schedule is a parsed expression.
type Schedule struct {
	s     robfig.Schedule
	years []yearRange // empty: every year
}

type yearRange struct{ from, to int }

var parser = robfig.NewParser(robfig.Second | robfig.Minute | robfig.Hour | robfig.Dom | robfig.Month | robfig.Dow | robfig.Descriptor)

// Parse reads a 6- or 7-field expression or a descriptor.
func Parse(expr string) (*Schedule, error) {
	fields := strings.Fields(expr)
	sch := &Schedule{}
	if len(fields) == 7 {
		yr, err := parseYears(fields[6])
		if err != nil {
			return nil, err
		}
		sch.years = yr
		fields = fields[:6]
	}
	if len(fields) != 6 && !strings.HasPrefix(strings.TrimSpace(expr), "@") {
		return nil, fmt.Errorf("%q has %d fields; a cron expression here has 6 (second minute hour day month weekday) or 7 (plus year)", expr, len(strings.Fields(expr)))
	}
	spec := strings.Join(fields, " ")
	if strings.HasPrefix(strings.TrimSpace(expr), "@") {
		spec = strings.TrimSpace(expr)
	}
	s, err := parser.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", expr, err)
	}
	sch.s = s
	return sch, nil
}

func parseYears(f string) ([]yearRange, error) {
	if f == "*" || f == "?" {
		return nil, nil
	}
	var out []yearRange
	for _, part := range strings.Split(f, ",") {
		a, b, isRange := strings.Cut(part, "-")
		from, err := strconv.Atoi(a)
		if err != nil {
			return nil, fmt.Errorf("year field %q: %q is not a year", f, part)
		}
		to := from
		if isRange {
			if to, err = strconv.Atoi(b); err != nil || to < from {
				return nil, fmt.Errorf("year field %q: %q is not a range of years", f, part)
			}
		}
		out = append(out, yearRange{from, to})
	}
	return out, nil
}

func (s *Schedule) yearOK(y int) bool {
	if len(s.years) == 0 {
		return true
	}
	for _, r := range s.years {
		if y >= r.from && y <= r.to {
			return true
		}
	}
	return false
}

// Next is the first tick after t; zero when there is none (its years are past).
func (s *Schedule) Next(t time.Time) time.Time {
	for range 100000 {
		t = s.s.Next(t)
		if t.IsZero() || s.yearOK(t.Year()) {
			return t
		}
		last := 0
		for _, r := range s.years {
			last = max(last, r.to)
		}
		if t.Year() > last {
			return time.Time{}
		}
	}
	return time.Time{}
}

// Service runs the cron jobs of one worker.
type Service struct {
	kv   jetstream.KeyValue // the tick lock; nil: no lock (one worker)
	fire Fire
	log  *slog.Logger
	ctx  context.Context
	// Call answers triggers' condition functions; without it a trigger naming one is refused.
	// Set it before the service is used.
	Call condition.Caller

	mu   sync.Mutex
	jobs map[string]context.CancelFunc
}

// Open returns a service whose ticks are locked in the namespace's bucket (js nil: unlocked).
func Open(ctx context.Context, js jetstream.JetStream, namespace string, fire Fire, log *slog.Logger) (*Service, error) {
	s := &Service{fire: fire, log: log, ctx: ctx, jobs: map[string]context.CancelFunc{}}
	if js != nil {
		kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "iii-cron-" + token(namespace), TTL: time.Hour,
			Storage: jetstream.FileStorage, Description: "iii cron tick locks of namespace " + namespace})
		if err != nil {
			return nil, fmt.Errorf("opening the cron lock bucket: %w", err)
		}
		s.kv = kv
	}
	return s, nil
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

// RegisterTrigger starts a job: config {expression, condition_function_id?}.
// A Service is the provider of its trigger type.
var _ protocol.TriggerHandler = (*Service)(nil)

func (s *Service) RegisterTrigger(_ context.Context, t protocol.Trigger) error {
	if err := triggerkeys.Check("cron", t.Config, "expression", "condition_function_id"); err != nil {
		return err
	}
	var cfg struct {
		Expression string `json:"expression"`
		Condition  string `json:"condition_function_id"`
	}
	if err := json.Unmarshal(t.Config, &cfg); err != nil || cfg.Expression == "" {
		return protocol.NewError(CodeInvalidExpression, "cron trigger config must be {expression, condition_function_id?}")
	}
	if cfg.Condition != "" && s.Call == nil {
		return protocol.NewError(errcode.InvalidArguments, "cron trigger config: condition_function_id %q cannot be evaluated by this cron service", cfg.Condition)
	}
	sch, err := Parse(cfg.Expression)
	if err != nil {
		return protocol.NewError(CodeInvalidExpression, "%v", err)
	}
	h := sha256.Sum256([]byte(t.Namespace + "\x00" + t.FunctionID + "\x00" + cfg.Expression))
	job := hex.EncodeToString(h[:12])
	ctx, cancel := context.WithCancel(s.ctx)
	s.mu.Lock()
	if old := s.jobs[t.ID]; old != nil {
		old()
	}
	s.jobs[t.ID] = cancel
	s.mu.Unlock()
	go s.run(ctx, t, sch, job, cfg.Condition)
	return nil
}

// UnregisterTrigger stops a job.
func (s *Service) UnregisterTrigger(_ context.Context, t protocol.Trigger) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cancel := s.jobs[t.ID]; cancel != nil {
		cancel()
		delete(s.jobs, t.ID)
	}
	return nil
}

func (s *Service) run(ctx context.Context, t protocol.Trigger, sch *Schedule, job, condFn string) {
	for {
		next := sch.Next(time.Now())
		if next.IsZero() {
			return
		}
		timer := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		if !s.claim(ctx, job, next) {
			continue
		}
		tick := Tick{Trigger: "cron", JobID: t.ID, ScheduledTime: next.UTC().Format(time.RFC3339Nano),
			ActualTime: time.Now().UTC().Format(time.RFC3339Nano)}
		if condFn != "" && !s.passes(ctx, t, condFn, tick) {
			continue
		}
		s.fire(t, tick)
	}
}

// passes calls the trigger's condition function with tick: true unless it answers false or
// fails.
func (s *Service) passes(ctx context.Context, t protocol.Trigger, condFn string, tick Tick) bool {
	ok, err := condition.Ask(ctx, s.Call, condFn, t.Namespace, tick)
	if err != nil {
		s.log.Warn("cron trigger condition failed; handler skipped", "trigger_id", t.ID, "condition_function_id", condFn, "err", err)
	}
	return ok
}

// claim reports whether this worker fires the tick at: the first to create its key.
func (s *Service) claim(ctx context.Context, job string, at time.Time) bool {
	if s.kv == nil {
		return true
	}
	_, err := s.kv.Create(ctx, job+"."+strconv.FormatInt(at.UnixMilli(), 10), nil)
	if err == nil {
		return true
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		s.log.Warn("claiming a cron tick; skipped", "job", job, "err", err)
	}
	return false
}
