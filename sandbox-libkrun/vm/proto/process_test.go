package proto

import (
	"bufio"
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// TestProcessMessages pins the JSON of the process messages both ends decode, and that each
// travels in a frame of its type.
func TestProcessMessages(t *testing.T) {
	zero := 0
	cases := []struct {
		typ  Type
		msg  any
		want string
	}{
		{TypeProcStart, ProcStart{Argv: []string{"sh", "-c", "x"}, TTY: &TermSize{Rows: 24, Cols: 80}, TimeoutMS: 5, RingBytes: 4096, Stdin: true, Attach: &ProcStreams{Stdout: 3, Stderr: 4, Stdin: 5}},
			`{"argv":["sh","-c","x"],"tty":{"rows":24,"cols":80},"timeout_ms":5,"ring_bytes":4096,"stdin":true,"attach":{"stdout":3,"stderr":4,"stdin":5}}`},
		{TypeProcStart, ProcStart{Argv: []string{"true"}}, `{"argv":["true"]}`},
		{TypeProcAttach, ProcAttach{ID: "p1", Streams: ProcStreams{Stdout: 7, Stderr: 8}}, `{"id":"p1","streams":{"stdout":7,"stderr":8}}`},
		{TypeReply, ProcAttached{Process: ProcInfo{ID: "p1", PID: 9, Argv: []string{"yes"}, StartedAtMS: 1, Exit: &ProcExit{ExitCode: &zero}}, DroppedStdout: 10},
			`{"process":{"id":"p1","pid":9,"argv":["yes"],"started_at_ms":1,"exit":{"exit_code":0}},"dropped_stdout":10}`},
		{TypeReply, ProcListed{Processes: []ProcInfo{{ID: "p2", PID: 3, Argv: []string{"sh"}, TTY: true, Attached: true}}},
			`{"processes":[{"id":"p2","pid":3,"argv":["sh"],"tty":true,"started_at_ms":0,"attached":true}]}`},
		{TypeProcWait, ProcRef{ID: "p3"}, `{"id":"p3"}`},
		{TypeProcSignal, ProcSignal{ID: "p3", Signal: 15}, `{"id":"p3","signal":15}`},
		{TypeProcResize, ProcResize{ID: "p3", Size: TermSize{Rows: 50, Cols: 132}}, `{"id":"p3","size":{"rows":50,"cols":132}}`},
		{TypeProcExit, ProcExit{Signal: 15}, `{"signal":15}`},
		{TypeProcExit, ProcExit{Signal: 9, TimedOut: true}, `{"signal":9,"timed_out":true}`},
		{TypeReply, Resumed{Agent: AgentVersion}, `{"agent":"iii-guest/10"}`},
	}
	for _, c := range cases {
		f, err := Marshal(c.typ, 42, c.msg)
		if err != nil {
			t.Fatal(err)
		}
		if string(f.Payload) != c.want {
			t.Errorf("%T: %s\nwant %s", c.msg, f.Payload, c.want)
		}
		var buf bytes.Buffer
		if err := Write(&buf, f); err != nil {
			t.Fatal(err)
		}
		got, err := Read(bufio.NewReader(&buf))
		if err != nil || got.Type != c.typ || got.ID != 42 {
			t.Fatalf("%T: frame %v/%d, %v", c.msg, got.Type, got.ID, err)
		}
		back := reflect.New(reflect.TypeOf(c.msg))
		if err := json.Unmarshal(got.Payload, back.Interface()); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back.Elem().Interface(), c.msg) {
			t.Errorf("%T: decoded %+v, want %+v", c.msg, back.Elem().Interface(), c.msg)
		}
	}
}
