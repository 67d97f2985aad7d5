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
	if r := c.GateRegistration(s, m, hook); r != nil || m.ID != "t1::ok" || m.Description != "by hook" {
		t.Errorf("admitted: refusal %v, frame %+v", r, m)
	}
	if seen[0] != `gate::on-fn {"context":{"u":1},"function_id":"ok"}` {
		t.Errorf("hook input %s", seen[0])
	}
	for _, id := range []string{"denied::x", "broken::x"} {
		m := &protocol.Message{Type: protocol.TypeRegisterFunction, ID: id}
		r := c.GateRegistration(s, m, hook)
		if r == nil || m.ID != id || !strings.Contains(r.Why, "gate::on-fn refused it") {
			t.Errorf("%s: refusal %v, frame %+v", id, r, m)
		}
		if f := Rejection(m, "default", "rbac-proxy"); f.Type != protocol.TypeRegistrationRejected || f.FunctionID != id || f.Code != "FORBIDDEN" {
			t.Errorf("%s: rejection %+v", id, f)
		}
	}
	tr := &protocol.Message{Type: protocol.TypeRegisterTrigger, ID: "tr1", TriggerType: "cron", FunctionID: "ok"}
	if r := c.GateRegistration(s, tr, hook); r == nil || !strings.Contains(r.Why, "allowed_trigger_types") {
		t.Errorf("a trigger type the session may not use: %v", r)
	}
	if f := Rejection(tr, "default", "rbac-proxy"); f.Type != protocol.TypeTriggerRegistrationResult || f.Error == nil || f.Error.Code != "FORBIDDEN" {
		t.Errorf("trigger rejection %+v", f)
	}
	tr = &protocol.Message{Type: protocol.TypeRegisterTrigger, ID: "tr2", TriggerType: "http", FunctionID: "ok"}
	if r := c.GateRegistration(s, tr, hook); r != nil || tr.FunctionID != "t1::ok" {
		t.Errorf("an admitted trigger: %v, %+v", r, tr)
	}
	tt := &protocol.Message{Type: protocol.TypeRegisterTriggerType, ID: "mine"}
	if r := c.GateRegistration(s, tt, hook); r == nil || Rejection(tt, "default", "x") != nil {
		t.Errorf("a trigger type without allow_trigger_type_registration: %v", r)
	}
	var open *Config
	m = &protocol.Message{Type: protocol.TypeRegisterFunction, ID: "any"}
	if r := open.GateRegistration(Open(), m, nil); r != nil || m.ID != "any" {
		t.Errorf("no rbac block: %v %+v", r, m)
	}
}
