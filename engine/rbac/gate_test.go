package rbac

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/iii-go/iii/engine/protocol"
)

func TestDenial(t *testing.T) {
	c := &Config{Expose: []Filter{{Match: "api::*"}}}
	s := &Session{ForbiddenFunctions: []string{"api::danger"}}
	if why := c.Denial(s, "api::echo", DefaultNamespace, nil); why != "" {
		t.Errorf("an exposed function is denied: %s", why)
	}
	if why := c.Denial(s, "api::danger", DefaultNamespace, nil); !strings.Contains(why, "forbidden_functions") {
		t.Errorf("a forbidden function: %q", why)
	}
	if why := c.Denial(s, "hidden::x", DefaultNamespace, nil); !strings.Contains(why, "expose_functions") {
		t.Errorf("an unexposed function: %q", why)
	}
	e := Forbidden("rbac-proxy", "hidden::x", "default", "why")
	if e.Code != "FORBIDDEN" || e.Message != "function 'hidden::x' in namespace 'default' is not allowed on rbac-proxy: why" {
		t.Errorf("Forbidden = %+v", e)
	}
}

func TestGateRegistration(t *testing.T) {
	c := &Config{OnFunctionRegistration: "gate::on-fn", OnTriggerRegistration: "gate::on-trig"}
	s := &Session{AllowFunctionRegistration: true, FunctionRegistrationPrefix: "t1", AllowedTriggerTypes: []string{"http"}, Context: json.RawMessage(`{"u":1}`)}
	var seen []string
	hook := func(id string, in json.RawMessage) (json.RawMessage, error) {
		seen = append(seen, id+" "+string(in))
		if strings.Contains(string(in), "denied::") {
			return json.RawMessage("false"), nil
		}
		if strings.Contains(string(in), "broken::") {
			return nil, errors.New("hook down")
		}
		return json.RawMessage(`{"description":"by hook"}`), nil
	}
	m := &protocol.Message{Type: protocol.TypeRegisterFunction, ID: "ok"}
	if r := c.GateRegistration(s, m, hook, bindAll); r != nil || m.ID != "t1::ok" || m.Description != "by hook" {
		t.Errorf("admitted: refusal %v, frame %+v", r, m)
	}
	if seen[0] != `gate::on-fn {"context":{"u":1},"function_id":"ok"}` {
		t.Errorf("hook input %s", seen[0])
	}
	for _, id := range []string{"denied::x", "broken::x"} {
		m := &protocol.Message{Type: protocol.TypeRegisterFunction, ID: id}
		r := c.GateRegistration(s, m, hook, bindAll)
		if r == nil || m.ID != id || !strings.Contains(r.Why, "gate::on-fn refused it") {
			t.Errorf("%s: refusal %v, frame %+v", id, r, m)
		}
		if f := Rejection(m, "default", "rbac-proxy", r); f.Type != protocol.TypeRegistrationRejected || f.FunctionID != id || f.Code != "FORBIDDEN" {
			t.Errorf("%s: rejection %+v", id, f)
		}
	}
	tr := &protocol.Message{Type: protocol.TypeRegisterTrigger, ID: "tr1", TriggerType: "cron", FunctionID: "ok"}
	r := c.GateRegistration(s, tr, hook, bindAll)
	if r == nil || !strings.Contains(r.Why, "allowed_trigger_types") {
		t.Errorf("a trigger type the session may not use: %v", r)
	}
	if f := Rejection(tr, "default", "rbac-proxy", r); f.Type != protocol.TypeTriggerRegistrationResult || f.Error == nil || f.Error.Code != "FORBIDDEN" {
		t.Errorf("trigger rejection %+v", f)
	}
	tr = &protocol.Message{Type: protocol.TypeRegisterTrigger, ID: "tr2", TriggerType: "http", FunctionID: "ok"}
	if r := c.GateRegistration(s, tr, hook, bindAll); r != nil || tr.FunctionID != "t1::ok" {
		t.Errorf("an admitted trigger: %v, %+v", r, tr)
	}
	tt := &protocol.Message{Type: protocol.TypeRegisterTriggerType, ID: "mine"}
	if r := c.GateRegistration(s, tt, hook, bindAll); r == nil || Rejection(tt, "default", "x", r) != nil {
		t.Errorf("a trigger type without allow_trigger_type_registration: %v", r)
	}
	var open *Config
	m = &protocol.Message{Type: protocol.TypeRegisterFunction, ID: "any"}
	if r := open.GateRegistration(Open(), m, nil, bindAll); r != nil || m.ID != "any" {
		t.Errorf("no rbac block: %v %+v", r, m)
	}
}

// bindAll lets a trigger bind any function.
func bindAll(string) string { return "" }

// A trigger's provider calls its function, and the functions its config names, with the
// provider's rights: a session may bind only what bind admits (what it may call, or serves).
func TestGateRegistrationBindsOnlyCallableFunctions(t *testing.T) {
	c := &Config{Expose: []Filter{{Match: "api::*"}}}
	s := &Session{AllowFunctionRegistration: true, FunctionRegistrationPrefix: "u1"}
	var asked []string
	bind := func(id string) string {
		asked = append(asked, id)
		if id == "u1::mine" || c.Allowed(s, id, DefaultNamespace, nil) {
			return ""
		}
		return "hidden"
	}
	for _, tc := range []struct {
		name, fn, config, why string
	}{
		{"own function", "mine", `{"api_path":"/a"}`, ""},
		{"exposed condition and middleware", "mine", `{"condition_function_id":"api::cond","middleware_function_ids":["api::mw"]}`, ""},
		{"hidden function", "secret::page", `{}`, "its function_id u1::secret::page may not be called by this session: hidden"},
		{"hidden condition", "mine", `{"condition_function_id":"secret::cond"}`, "its config names secret::cond, which may not be called by this session: hidden"},
		{"hidden middleware", "mine", `{"middleware_function_ids":["api::mw","secret::mw"]}`, "its config names secret::mw"},
		{"any key naming a function", "mine", `{"on_change_function_id":"secret::x"}`, "secret::x"},
		{"not an id", "mine", `{"condition_function_id":7}`, "config key condition_function_id must be a function id"},
		{"not a list of ids", "mine", `{"middleware_function_ids":"secret::mw"}`, "config key middleware_function_ids must be a list"},
	} {
		m := &protocol.Message{Type: protocol.TypeRegisterTrigger, ID: "t", TriggerType: "http", FunctionID: tc.fn, Config: json.RawMessage(tc.config)}
		r := c.GateRegistration(s, m, nil, bind)
		switch {
		case tc.why == "" && r != nil:
			t.Errorf("%s: refused: %v", tc.name, r.Why)
		case tc.why != "" && (r == nil || !strings.Contains(r.Why, tc.why)):
			t.Errorf("%s: refusal %v, want one saying %q", tc.name, r, tc.why)
		case tc.why != "" && m.FunctionID != tc.fn:
			t.Errorf("%s: a refused frame was rewritten: %+v", tc.name, m)
		}
		if tc.why != "" {
			if f := Rejection(m, "default", "listener public", r); f.Error == nil || f.Error.Code != "FORBIDDEN" || !strings.Contains(f.Error.Message, r.Why) {
				t.Errorf("%s: rejection %+v", tc.name, f)
			}
		}
	}
	if len(asked) == 0 || asked[0] != "u1::mine" {
		t.Errorf("bind is asked about the prefixed function first: %v", asked)
	}
}

func TestGateFunctions(t *testing.T) {
	c := &Config{AuthFunctionID: "my::auth", OnTriggerRegistration: "my::on-trig"}
	if got := strings.Join(c.GateFunctions(), ","); got != "my::auth,my::on-trig" {
		t.Errorf("GateFunctions = %s", got)
	}
	var none *Config
	if none.GateFunctions() != nil {
		t.Error("no rbac block names no function")
	}
}

// A session never serves an engine id, whatever its hook says, on a gated listener as through
// the rbac-proxy (both decide with GateRegistration): engine::console::* is for a worker outside
// a session, as iii's console is. Without a prefix only: a prefixed id is no longer an engine id.
func TestGateRegistrationRefusesEngineIDs(t *testing.T) {
	admit := func(string, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{}`), nil }
	c := &Config{OnFunctionRegistration: "gate::on-fn"}
	for _, id := range []string{"engine::console::status", "configuration::x", "sandbox::create"} {
		m := &protocol.Message{Type: protocol.TypeRegisterFunction, ID: id}
		r := c.GateRegistration(&Session{AllowFunctionRegistration: true}, m, admit, bindAll)
		if r == nil || r.What != id || !strings.Contains(r.Why, "outside a gated session") {
			t.Errorf("%s: refusal %v", id, r)
		}
	}
	m := &protocol.Message{Type: protocol.TypeRegisterFunction, ID: "engine::console::status"}
	if r := c.GateRegistration(&Session{AllowFunctionRegistration: true, FunctionRegistrationPrefix: "t1"}, m, admit, bindAll); r != nil || m.ID != "t1::engine::console::status" {
		t.Errorf("prefixed: refusal %v, id %s", r, m.ID)
	}
}
