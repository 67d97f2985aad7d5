package daemon

import (
	"context"
	"testing"

	"github.com/iii-go/iii/compose/errcode"
)

func TestOperationIDs(t *testing.T) {
	var o operations
	e, err := o.begin(FnUpdate, Request{OperationID: "upd", Worker: "hello"})
	if err != nil || e.snap.OperationID != "upd" || e.snap.State != OpAccepted || e.snap.Requested[0] != "hello" {
		t.Fatalf("begin: %+v %v", e, err)
	}
	if _, err := o.begin(FnAdd, Request{OperationID: "upd"}); errcode.CodeOf(err) != errcode.OperationIDAlreadyExists {
		t.Fatalf("a running id reused: %v", err)
	}
	if _, err := o.begin(FnAdd, Request{ProgressOperationID: "upd"}); errcode.CodeOf(err) != errcode.OperationIDAlreadyExists {
		t.Fatalf("progress_operation_id reused: %v", err)
	}
	gen, err := o.begin(FnAdd, Request{})
	if err != nil || len(gen.snap.OperationID) != len("op-")+16 {
		t.Fatalf("generated id: %+v %v", gen, err)
	}
	o.record(e, "edit compose file")
	o.record(e, "resolve and install")
	s := o.snapshot(e)
	if len(s.Steps) != 3 || s.Steps[1].State != "done" || s.Steps[2].State != "running" || s.Progress != (Progress{Done: 2, Total: 3}) {
		t.Fatalf("steps %+v progress %+v", s.Steps, s.Progress)
	}
	o.set(e, func(s *Operation) { s.State = OpSucceeded })
	if _, err := o.begin(FnAdd, Request{OperationID: "upd"}); err != nil {
		t.Fatalf("a finished id may be used again: %v", err)
	}
	got, err := o.lookup(Request{})
	if err != nil || got.snap.OperationID != "upd" {
		t.Fatalf("newest: %+v %v", got, err)
	}
	if _, err := o.lookup(Request{OperationID: "nope"}); errcode.CodeOf(err) != errcode.UnknownOperation {
		t.Fatalf("unknown: %v", err)
	}
}

func TestStepOutsideOperation(t *testing.T) {
	step(context.Background(), "nothing records this") // must not panic
}
