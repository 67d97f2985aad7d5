package daemon

import (
	"context"
	"encoding/json"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/iii-go/iii/compose/composefile"
	"github.com/iii-go/iii/compose/errcode"
)

// ComposeFileSchemaID is the pseudo function id compose::schema answers with the JSON Schema of
// worker-compose.yaml and an example file.
const ComposeFileSchemaID = "worker-compose.yaml"

// FunctionSchema describes one compose::* function (compose::schema).
type FunctionSchema struct {
	FunctionID       string          `json:"function_id"`
	Description      string          `json:"description"`
	Request          json.RawMessage `json:"request,omitempty"`
	Response         json.RawMessage `json:"response,omitempty"`
	DefaultTimeoutMS int64           `json:"default_timeout_ms,omitempty"`
	Idempotent       bool            `json:"idempotent"`
	// Schema and Example are set for the pseudo id worker-compose.yaml only.
	Schema  json.RawMessage `json:"schema,omitempty"`
	Example string          `json:"example,omitempty"`
}

// SchemaReply is the reply of compose::schema.
type SchemaReply struct {
	Schemas []FunctionSchema `json:"schemas"`
}

// fieldSchemas are the JSON Schemas of the request fields.
var fieldSchemas = map[string]any{
	"namespace": map[string]any{"type": "string", "description": "Guard: fails WRONG_DAEMON unless it is the daemon's namespace"},
	"file":      map[string]any{"type": "string", "description": "Guard: the project's compose file (relative to the daemon's directory)"},
	"container": map[string]any{"type": "string", "description": "A container key"},
	"worker": map[string]any{"description": "A worker: a container key or package name; for add NAME[@VERSION], HOST/NAME or ./DIR",
		"anyOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "array", "items": map[string]any{"type": "string"}}}},
	"workers": map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
	"cursors": map[string]any{"type": "object", "description": "Per worker, where the previous reply stopped",
		"additionalProperties": typeSchema(reflect.TypeFor[LogsWorker]()).(map[string]any)["properties"].(map[string]any)["cursor"]},
	"tail":                  map[string]any{"type": "integer", "minimum": 0, "maximum": LogsMaxTail, "description": "Entries per worker (default 100 for a snapshot, 1000 after a cursor)"},
	"stream":                map[string]any{"enum": []any{"stdout", "stderr"}},
	"wait_ms":               map[string]any{"type": "integer", "minimum": 0, "maximum": LogsMaxWait.Milliseconds(), "description": "With cursors: wait this long for new entries"},
	"function_id":           map[string]any{"type": "string", "description": "One compose::* function, or worker-compose.yaml for the file's schema"},
	"operation_id":          map[string]any{"type": "string", "description": "A caller-chosen id for the operation (add, remove, update), or the operation to look at (operation, cancel)"},
	"progress_operation_id": map[string]any{"type": "string", "description": "The older name of operation_id"},
	"wait": map[string]any{"type": "boolean", "default": true,
		"description": "true (default): answer with the operation's result once it is over; false: answer at once with {operation_id, status: accepted} and follow it with compose::operation"},
}

// validateReply is the reply of compose::validate.
type validateReply struct {
	Namespace        string   `json:"namespace"`
	StartOrder       []string `json:"start_order"`
	DeferredPackages []string `json:"deferred_packages"`
}

// stopReply is the reply of compose::stop.
type stopReply struct {
	Daemon    string   `json:"daemon"`
	DaemonPID int      `json:"daemon_pid"`
	Stopping  []string `json:"stopping"`
}

// cancelReply is the reply of compose::cancel.
type cancelReply struct {
	OperationID string `json:"operation_id"`
	Cancelled   bool   `json:"cancelled"`
	State       string `json:"state"`
}

func (d *Daemon) schema(_ context.Context, r Request) (any, error) {
	if r.FunctionID == ComposeFileSchemaID {
		return SchemaReply{Schemas: []FunctionSchema{{FunctionID: ComposeFileSchemaID,
			Description: "The JSON Schema of worker-compose.yaml, and an example file", Idempotent: true,
			Schema: composefile.Schema(), Example: composefile.Example}}}, nil
	}
	fns := d.functions()
	ids := slices.Sorted(maps.Keys(fns))
	if r.FunctionID != "" {
		if _, ok := fns[r.FunctionID]; !ok {
			return nil, errcode.New(errcode.UnknownFunction, "compose::schema knows %s and %s, not '%s'", strings.Join(ids, ", "), ComposeFileSchemaID, r.FunctionID)
		}
		ids = []string{r.FunctionID}
	}
	out := SchemaReply{Schemas: []FunctionSchema{}}
	for _, id := range ids {
		out.Schemas = append(out.Schemas, describe(id, fns[id]))
	}
	return out, nil
}

func describe(id string, f function) FunctionSchema {
	props := map[string]any{}
	for _, name := range f.fields {
		props[name] = fieldSchemas[name]
	}
	req, _ := json.Marshal(map[string]any{"type": "object", "additionalProperties": false, "properties": props})
	resp, _ := json.Marshal(typeSchema(reflect.TypeOf(f.response)))
	return FunctionSchema{FunctionID: id, Description: f.description(), Request: req, Response: resp,
		DefaultTimeoutMS: f.timeout.Milliseconds(), Idempotent: f.idempotent}
}

// typeSchema derives a JSON Schema from a Go type through its json tags.
func typeSchema(t reflect.Type) any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeFor[time.Time]():
		return map[string]any{"type": "string", "format": "date-time"}
	case t == reflect.TypeFor[json.RawMessage]():
		return map[string]any{}
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice, reflect.Array:
		return map[string]any{"type": "array", "items": typeSchema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": typeSchema(t.Elem())}
	case reflect.Struct:
		props := map[string]any{}
		var required []string
		for i := 0; i < t.NumField(); i++ {
			fd := t.Field(i)
			if !fd.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(fd.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = fd.Name
			}
			props[name] = typeSchema(fd.Type)
			if !strings.Contains(opts, "omitempty") {
				required = append(required, name)
			}
		}
		s := map[string]any{"type": "object", "properties": props}
		if len(required) > 0 {
			s["required"] = required
		}
		return s
	}
	return map[string]any{}
}
