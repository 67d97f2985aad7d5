package wire

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

func ns(s string) *string { return &s }

var samples = []*Message{
	{Type: TypeRegisterFunction, ID: "math::add", Description: "Add \"two\" numbers\n\t<ok> & é \u2028", RequestFormat: json.RawMessage(`{"type":"object"}`)},
	{Type: TypeInvokeFunction, InvocationID: "9f3c", FunctionID: "math::add", Data: json.RawMessage(`{"a":2,"b":3}`), Namespace: ns("orders"), TimeoutMS: 1500, Metadata: json.RawMessage(`{"tenant":"acme"}`)},
	{Type: TypeRegisterFunction, ID: "compose::stop", Protected: true},
	{Type: TypeRegisterFunction, ID: "x::h", Invocation: json.RawMessage(`{"url":"http://127.0.0.1:9/hook","method":"POST","timeout_ms":1000}`)},
	{Type: TypeInvokeFunction, FunctionID: "notify::send", Data: json.RawMessage(`{}`), Action: &Action{Type: "void"}},
	{Type: TypeInvocationResult, InvocationID: "1", FunctionID: "f", Error: NewError("invocation_failed", "boom \x01 \xff")},
	{Type: TypeInvocationResult, InvocationID: "1", FunctionID: "f", Error: RawError(json.RawMessage(`{"type":"validation","code":"S002","message":"m","docs_url":"u","retryable":false,"fix":null,"fix_note":"n","extra":[1]}`))},
	{Type: TypeWorkerRegistered, WorkerID: "w", ReattachToken: "t"},
	{Type: TypeRegistrationRejected, Code: "FUNCTION_NAMESPACE_CONFLICT", Namespace: ns(""), FunctionID: "state::get", OwnerWorkerID: "o", WorkerName: "n"},
	{Type: TypePing},
	{Type: TypeRegisterTriggerType, ID: "cron", Description: "ticks", TriggerRequestFormat: json.RawMessage(`{"type":"object"}`), CallRequestFormat: json.RawMessage(`{}`)},
	{Type: TypeRegisterTrigger, ID: "t1", TriggerType: "cron", FunctionID: "jobs::tick", Config: json.RawMessage(`{"expression":"* * * * * *"}`), Metadata: json.RawMessage(`{"m":1}`)},
	{Type: TypeTriggerRegistrationResult, ID: "t1", TriggerType: "cron", FunctionID: "jobs::tick", Error: NewError("trigger_registration_failed", "bad")},
}

// TestEncodeMatchesEncodingJSON: the hand-written encoder produces what encoding/json would.
func TestEncodeMatchesEncodingJSON(t *testing.T) {
	for _, m := range samples {
		got, _ := Encode(m)
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("invalid JSON %s: %v", got, err)
		}
		_ = json.Unmarshal(want, &w)
		if d := cmp.Diff(w, g); d != "" {
			t.Errorf("%s: (-encoding/json +Encode)\n%s", m.Type, d)
		}
	}
}

// TestDecodeRoundTrip: Decode(Encode(m)) gives m back, and the S-code envelope keeps every key.
func TestDecodeRoundTrip(t *testing.T) {
	for _, m := range samples {
		b, _ := Encode(m)
		back, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		again, _ := Encode(back)
		if string(again) != string(b) {
			t.Errorf("round trip changed the frame:\n%s\n%s", b, again)
		}
	}
	m, _ := Decode([]byte(`{"type":"invocationresult","invocation_id":"1","error":{"code":"S301","docs_url":"x","fix":{"a":1}}}`))
	if d := cmp.Diff(`{"code":"S301","docs_url":"x","fix":{"a":1}}`, string(m.Error.Raw())); d != "" {
		t.Error(d)
	}
}

func TestDecodeRejects(t *testing.T) {
	for _, in := range []string{``, `[]`, `{"type":`, `{"x":1}`, `{"type":"frobnicate"}`, `{"type":"invokefunction","namespace":5}`} {
		if _, err := Decode([]byte(in)); err == nil {
			t.Errorf("Decode(%q) accepted", in)
		}
	}
}

// FuzzDecode: no input crashes Decode; every frame it accepts encoding/json accepts too and
// decodes to the same frame (compared by their encodings), and re-encodes to valid JSON that
// decodes to the same frame. Inputs that are not UTF-8 are compared only with themselves:
// encoding/json replaces invalid bytes in strings with U+FFFD, the decoder keeps them.
func FuzzDecode(f *testing.F) {
	for _, m := range samples {
		b, _ := Encode(m)
		f.Add(b)
	}
	f.Add([]byte(`{"type":"invokefunction","data":null,"error":"plain"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		if !json.Valid(b) {
			t.Fatalf("Decode accepted invalid JSON %q", b)
		}
		out, _ := Encode(m)
		if utf8.Valid(b) {
			var want Message
			if err := json.Unmarshal(b, &want); err != nil {
				t.Fatalf("Decode accepted %q, encoding/json refuses it: %v", b, err)
			}
			if w, _ := Encode(&want); string(w) != string(out) {
				t.Fatalf("Decode and encoding/json differ on %q:\n%s\n%s", b, out, w)
			}
		}
		if !json.Valid(out) {
			t.Fatalf("Encode produced invalid JSON %q from %q", out, b)
		}
		back, err := Decode(out)
		if err != nil {
			t.Fatalf("re-decoding %q: %v", out, err)
		}
		again, _ := Encode(back)
		if string(again) != string(out) {
			t.Fatalf("not stable:\n%s\n%s", out, again)
		}
	})
}

// TestDecodeMatchesEncodingJSON: the frame decoder agrees with encoding/json on valid frames.
func TestDecodeMatchesEncodingJSON(t *testing.T) {
	inputs := []string{
		`{"type":"invokefunction","invocation_id":"a\u00e9\ud83d\ude00\"","function_id":"x::y","data":{"k":[1,2.5e3,-0,true,null,"s"]},"namespace":"ns","timeout_ms":42,"action":{"type":"void"},"unknown":{"deep":[[]]}}`,
		`{"TYPE":"ping","Data":null,"result":null,"error":null,"namespace":null}`,
		` {"type":"invocationresult","error":{"code":"c","message":"m","stacktrace":"s\nt"},"result":[ 1 , 2 ]} `,
		`{"type":"registerfunction","id":"a","id":"b","request_format":{"type":"object"},"metadata":{}}`,
		`{"type":"registerfunction","id":"x::h","invocation":{"url":"http://h/","method":"POST"},"Invocation":null}`,
		`{"type":"workerregistered","worker_id":"w","reattach_token":"\ud800x"}`,
		`{"type":"invokefunction","function_id":"x\u003a:y","namespace":"n\u00e9s","Function_Id":"z::w"}`,
		`{"type":"invokefunction","function_id":"café::x","namespace":"tab\there"}`,
	}
	for _, in := range inputs {
		got, err := decodeFrame([]byte(in), false)
		if err != nil {
			t.Fatalf("%s: %v", in, err)
		}
		var want Message
		if err := json.Unmarshal([]byte(in), &want); err != nil {
			t.Fatal(err)
		}
		g, _ := Encode(got)
		w, _ := Encode(&want)
		if d := cmp.Diff(string(w), string(g)); d != "" {
			t.Errorf("%s: (-encoding/json +decodeFrame)\n%s", in, d)
		}
	}
	for _, bad := range []string{`{"type":"x",}`, `{"type":1}`, `{"type":"x"} x`, `{"a":01}`, `{"a":"\x"}`, `{"timeout_ms":1.5,"type":"ping"}`, `{"a":[1,]}`, "{\"a\":\"\x01\"}"} {
		_, err1 := decodeFrame([]byte(bad), false)
		var m Message
		err2 := json.Unmarshal([]byte(bad), &m)
		if err1 == nil || err2 == nil {
			t.Errorf("%q: decodeFrame err %v, encoding/json err %v; both should fail", bad, err1, err2)
		}
	}
}

// TestDecodeInternsRepeatedNames: function ids and namespaces that repeat from frame to frame
// decode to the string made for an earlier frame, and a different name to its own.
func TestDecodeInternsRepeatedNames(t *testing.T) {
	frame := func(fn, ns string) *Message {
		m, err := Decode([]byte(`{"type":"invokefunction","function_id":"` + fn + `","namespace":"` + ns + `"}`))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	a, b := frame("math::add", "math"), frame("math::add", "math")
	if a.FunctionID != "math::add" || *a.Namespace != "math" || b.FunctionID != "math::add" {
		t.Fatalf("decoded %q in %q", a.FunctionID, *a.Namespace)
	}
	if a.Namespace != b.Namespace {
		t.Error("a repeated namespace was allocated again")
	}
	c := frame("math::sub", "other")
	if c.FunctionID != "math::sub" || *c.Namespace != "other" || *a.Namespace != "math" {
		t.Fatalf("decoded %q in %q after %q", c.FunctionID, *c.Namespace, *a.Namespace)
	}
}

// TestValidAgreesWithEncodingJSON: Valid, which replaced json.Valid for payloads and
// results, accepts and rejects the same inputs.
func TestValidAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range []string{
		`{}`, `[]`, `null`, `true`, `false`, `0`, `-0.5e+10`, `"a\u00e9\n"`, ` {"a":[1,2,{"b":null}]} `,
		`{"a":1,}`, `[1,]`, `{"a"}`, `01`, `1.`, `"\x"`, `"unterminated`, `{} {}`, ``, ` `, `nul`, `{"a":1}x`,
		"\"tab\tinside\"", `"\ud800"`, `[[[[]]]]`, `-`, `1e`, `{"a":"\u12"}`,
	} {
		if got, want := Valid([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Errorf("Valid(%q) = %v, json.Valid = %v", s, got, want)
		}
	}
}

// TestDecodeBorrowedAndOwn: DecodeBorrowed's raw fields are the input's bytes; after Own they
// are copies, unchanged when the input buffer is reused. Decode never refers to its input.
func TestDecodeBorrowedAndOwn(t *testing.T) {
	const frame = `{"type":"invokefunction","function_id":"f","data":{"a":1},"metadata":[2],"result":"r","config":{},"request_format":{"type":"object"}}`
	b := []byte(frame)
	m, err := DecodeBorrowed(b)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data) != `{"a":1}` || string(m.Metadata) != `[2]` || string(m.Result) != `"r"` {
		t.Fatalf("decoded data %s metadata %s result %s", m.Data, m.Metadata, m.Result)
	}
	if &m.Data[0] != &b[strings.Index(frame, `{"a"`)] {
		t.Error("DecodeBorrowed copied the data")
	}
	_ = append(m.Data, 'x')
	if b[strings.Index(frame, `{"a"`)+len(`{"a":1}`)] != ',' {
		t.Error("appending to a borrowed field wrote into the input")
	}
	Own(m)
	copy(b, bytes.Repeat([]byte("#"), len(b)))
	want := []string{`{"a":1}`, `[2]`, `"r"`, `{}`, `{"type":"object"}`}
	for i, got := range []json.RawMessage{m.Data, m.Metadata, m.Result, m.Config, m.RequestFormat} {
		if string(got) != want[i] {
			t.Errorf("after Own and reuse of the input: field %d is %s, want %s", i, got, want[i])
		}
	}
	b = []byte(frame)
	d, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	copy(b, bytes.Repeat([]byte("#"), len(b)))
	if string(d.Data) != `{"a":1}` {
		t.Errorf("Decode's data changed with its input: %s", d.Data)
	}
}
