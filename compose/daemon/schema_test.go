package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/iii-go/iii/compose/errcode"
	"github.com/iii-go/iii/compose/supervisor"
)

func compile(t *testing.T, name string, raw json.RawMessage) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(name, doc); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	s, err := c.Compile(name)
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, raw)
	}
	return s
}

func validate(t *testing.T, s *jsonschema.Schema, v any) error {
	t.Helper()
	raw, _ := json.Marshal(v)
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return s.Validate(inst)
}

// Every compose::* function has request and response schemas that
// compile, and the replies the daemon builds validate against them.
func TestSchemas(t *testing.T) {
	d := &Daemon{}
	out, err := d.schema(context.Background(), Request{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]FunctionSchema{}
	for _, s := range out.(SchemaReply).Schemas {
		got[s.FunctionID] = s
		compile(t, s.FunctionID+"-request", s.Request)
		compile(t, s.FunctionID+"-response", s.Response)
		if s.DefaultTimeoutMS <= 0 || s.Description == "" {
			t.Errorf("%s: %+v", s.FunctionID, s)
		}
	}
	for _, id := range []string{FnUp, FnDown, FnStatus, FnList, FnLogs, FnValidate, FnAdd, FnRemove, FnRestart, FnUpdate, FnStop, FnSchema, FnOperation, FnCancel} {
		if _, ok := got[id]; !ok {
			t.Errorf("no schema for %s", id)
		}
	}
	if len(got) != 14 {
		t.Errorf("%d schemas", len(got))
	}
	logs := compile(t, "logs-response", got[FnLogs].Response)
	reply := LogsReply{Workers: []LogsWorker{{Container: "api", Entries: []supervisor.Entry{{Stream: "stdout", Message: "hi"}}, Cursor: supervisor.Cursor{Generation: 2, Offset: 10}}}}
	if err := validate(t, logs, reply); err != nil {
		t.Fatalf("a logs reply does not validate: %v", err)
	}
	if err := validate(t, logs, map[string]any{"workers": []any{map[string]any{"container": 1}}}); err == nil {
		t.Fatal("a wrong reply validates")
	}
	req := compile(t, "logs-request", got[FnLogs].Request)
	if err := validate(t, req, map[string]any{"container": "api", "tail": 5, "cursors": map[string]any{"api": map[string]any{"generation": 1, "offset": 2}}}); err != nil {
		t.Fatalf("a logs request does not validate: %v", err)
	}
	if err := validate(t, req, map[string]any{"tail": 5000}); err == nil {
		t.Fatal("tail 5000 validates")
	}

	one, err := d.schema(context.Background(), Request{FunctionID: FnLogs})
	if err != nil || len(one.(SchemaReply).Schemas) != 1 {
		t.Fatalf("function_id=compose::logs: %v %v", one, err)
	}
	if _, err := d.schema(context.Background(), Request{FunctionID: "compose::nope"}); errcode.CodeOf(err) != errcode.UnknownFunction {
		t.Fatalf("unknown function: %v", err)
	}
}

func TestComposeFileSchema(t *testing.T) {
	out, err := (&Daemon{}).schema(context.Background(), Request{FunctionID: ComposeFileSchemaID})
	if err != nil {
		t.Fatal(err)
	}
	s := out.(SchemaReply).Schemas[0]
	if s.FunctionID != ComposeFileSchemaID || s.Example == "" {
		t.Fatalf("%+v", s)
	}
	compile(t, "worker-compose.json", s.Schema)
}
