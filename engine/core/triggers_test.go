package core

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/iii-go/iii/engine/enginetest"
	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/engine/triggers"
	"github.com/iii-go/iii/internal/base/errcode"
)

// tickProvider is a provider of trigger type "tick" that refuses configs with "bad": true.
type tickProvider struct {
	mu     sync.Mutex
	active map[string]protocol.Trigger
	gone   []string
}

func (p *tickProvider) RegisterTrigger(_ context.Context, t protocol.Trigger) error {
	var cfg struct{ Bad bool }
	_ = json.Unmarshal(t.Config, &cfg)
	if cfg.Bad {
		return protocol.NewError("INVALID_TICK", "bad tick config")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.active[t.ID] = t
	return nil
}

func (p *tickProvider) UnregisterTrigger(_ context.Context, t protocol.Trigger) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.active, t.ID)
	p.gone = append(p.gone, t.ID)
	return nil
}

func (p *tickProvider) snapshot() (map[string]protocol.Trigger, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := map[string]protocol.Trigger{}
	for k, v := range p.active {
		m[k] = v
	}
	return m, append([]string(nil), p.gone...)
}

func startProvider(t *testing.T, url string) (*protocol.Worker, *tickProvider) {
	t.Helper()
	p := &tickProvider{active: map[string]protocol.Trigger{}}
	w := protocol.NewWorker(protocol.Config{URL: url, Name: "ticker"})
	if err := w.RegisterTriggerType("tick", "test ticks", p); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return w, p
}

// A trigger registered before its provider is parked, forwarded once the provider registers,
// fires the bound function with its metadata, is refused with the provider's own code, goes
// back to parked when the provider leaves and is sent to the next one, and goes when its
// owner disconnects.
func TestTriggersThroughEngine(t *testing.T) {
	e := New(Options{})
	url := enginetest.Start(t, e).URL
	got := make(chan json.RawMessage, 4)
	consumer := enginetest.Worker(t, url, "default", map[string]protocol.Handler{
		"jobs::on-tick": func(_ context.Context, in json.RawMessage) (any, error) { got <- in; return "ok", nil },
	})
	good, err := consumer.RegisterTrigger("tick", "jobs::on-tick", map[string]any{"every": "1s"}, protocol.TriggerMetadata(json.RawMessage(`{"team":"a"}`)))
	if err != nil {
		t.Fatal(err)
	}
	bad, _ := consumer.RegisterTrigger("tick", "jobs::on-tick", map[string]any{"bad": true})
	enginetest.Eventually(t, "two parked triggers", 5*time.Second, func() bool {
		rows := e.triggers.Triggers(filterAll)
		return len(rows) == 2 && rows[0].Status == "parked" && rows[1].Status == "parked"
	})

	prov, p := startProvider(t, url)
	enginetest.Eventually(t, "the good trigger at the provider", 5*time.Second, func() bool { a, _ := p.snapshot(); return len(a) == 1 })
	enginetest.Eventually(t, "the refusal at the consumer", 5*time.Second, func() bool { return consumer.TriggerError(bad) != nil })
	if c := consumer.TriggerError(bad).Code; c != "INVALID_TICK" {
		t.Errorf("refusal code %s", c)
	}
	if consumer.TriggerError(good) != nil {
		t.Errorf("good trigger refused: %v", consumer.TriggerError(good))
	}
	active, _ := p.snapshot()
	tr := active[good]
	if tr.FunctionID != "jobs::on-tick" || tr.Namespace != "default" || string(tr.Metadata) != `{"team":"a"}` || string(tr.Config) != `{"every":"1s"}` {
		t.Errorf("provider got %+v", tr)
	}

	// The provider fires: an ordinary call of the bound function.
	res, err := prov.Call(context.Background(), tr.FunctionID, map[string]int{"n": 1}, tr.CallOptions()...)
	if err != nil || string(res) != `"ok"` {
		t.Fatalf("firing: %s, %v", res, err)
	}
	if in := <-got; string(in) != `{"n":1}` {
		t.Errorf("function got %s", in)
	}

	// Listings.
	cl := enginetest.Worker(t, url, "default", nil)
	out, err := cl.Call(context.Background(), FnListTriggerTypes, nil)
	if err != nil {
		t.Fatal(err)
	}
	var types struct {
		Triggers []struct {
			ID         string
			WorkerName string `json:"worker_name"`
		}
	}
	_ = json.Unmarshal(out, &types)
	if len(types.Triggers) != 1 || types.Triggers[0].ID != "tick" || types.Triggers[0].WorkerName != "ticker" {
		t.Errorf("trigger types %s", out)
	}
	out, _ = cl.Call(context.Background(), FnListTriggers, map[string]any{"trigger_type": "tick", "include_refused": true})
	var regs struct {
		RegisteredTriggers []struct{ ID, Status string } `json:"registered_triggers"`
	}
	_ = json.Unmarshal(out, &regs)
	if len(regs.RegisteredTriggers) != 2 {
		t.Errorf("registered triggers %s", out)
	}

	// The provider leaves: both wait for the next one, which gets them again.
	prov.Close()
	enginetest.Eventually(t, "triggers parked again", 5*time.Second, func() bool {
		rows := e.triggers.Triggers(filterAll)
		return len(rows) == 2 && rows[0].ProviderID == "" && rows[1].ProviderID == ""
	})
	_, p2 := startProvider(t, url)
	enginetest.Eventually(t, "the good trigger at the second provider", 5*time.Second, func() bool { a, _ := p2.snapshot(); _, ok := a[good]; return ok })

	// The consumer unregisters one trigger, then leaves: the provider drops both.
	if err := consumer.UnregisterTrigger(bad); err != nil {
		t.Fatal(err)
	}
	consumer.Close()
	enginetest.Eventually(t, "the good trigger dropped", 5*time.Second, func() bool { a, g := p2.snapshot(); return len(a) == 0 && len(g) >= 1 })
	enginetest.Eventually(t, "no triggers left", 5*time.Second, func() bool { return len(e.triggers.Triggers(filterAll)) == 0 })
}

// A 0.26 observe frame gets an observeresult with UNSUPPORTED, never silence.
func TestObserveUnsupported(t *testing.T) {
	url := enginetest.Start(t, New(Options{})).URL
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	obs := `{"type":"observe","id":"obs-1","source":{"function_id":"cron::on-tick","args":{"expression":"* * * * * *"}},"target":{"function_id":"jobs::x"}}`
	if err := ws.Write(ctx, websocket.MessageText, []byte(obs)); err != nil {
		t.Fatal(err)
	}
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m, err := protocol.Decode(b)
		if err != nil || m.Type != protocol.TypeObserveResult {
			continue
		}
		if m.ID != "obs-1" || m.Error == nil || m.Error.Code != errcode.Unsupported {
			t.Fatalf("observeresult %s", b)
		}
		return
	}
}

var filterAll = triggers.Filter{IncludeRefused: true}

// action enqueue goes to the queue worker's queue::enqueue, whose answer is the caller's result;
// the target function does not run now.
func TestEnqueueRoutesToQueueWorker(t *testing.T) {
	url := enginetest.Start(t, New(Options{})).URL
	got := make(chan json.RawMessage, 1)
	ran := make(chan struct{}, 1)
	enginetest.Worker(t, url, "default", map[string]protocol.Handler{
		FnQueueEnqueue: func(_ context.Context, in json.RawMessage) (any, error) {
			got <- in
			return map[string]string{"messageReceiptId": "r-1"}, nil
		},
		"pay::charge": func(context.Context, json.RawMessage) (any, error) { ran <- struct{}{}; return nil, nil },
	})
	cl := enginetest.Worker(t, url, "default", nil)
	out, err := cl.Call(context.Background(), "pay::charge", map[string]int{"cents": 5}, protocol.Enqueue("payment"))
	if err != nil || string(out) != `{"messageReceiptId":"r-1"}` {
		t.Fatalf("enqueue: %s, %v", out, err)
	}
	var in struct {
		Queue      string
		FunctionID string `json:"function_id"`
		Namespace  string
		Data       json.RawMessage
	}
	b := <-got
	_ = json.Unmarshal(b, &in)
	if in.Queue != "payment" || in.FunctionID != "pay::charge" || in.Namespace != "default" || string(in.Data) != `{"cents":5}` {
		t.Errorf("queue::enqueue got %s", b)
	}
	select {
	case <-ran:
		t.Error("the enqueued function ran as a plain call")
	default:
	}
}
