//go:build linux

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"strconv"
	"testing"

	"github.com/iii-go/iii/sandbox-libkrun/vm"
	"github.com/iii-go/iii/sandbox-libkrun/vm/proto"
)

func sendProc(t *testing.T, w *os.File, typ proto.Type, id uint32, v any) {
	t.Helper()
	f, err := proto.Marshal(typ, id, v)
	if err != nil {
		t.Fatal(err)
	}
	send(t, w, f)
}

// attachedRun reads an attachment's frames until both streams ended, crediting every Data
// frame, and returns each stream's bytes, the exit notice, and the request's Reply.
type attachedRun struct {
	out, err []byte
	exit     *proto.ProcExit
	reply    *proto.Reply
	ends     map[uint32]string
}

func readAttachment(t *testing.T, host *os.File, r *bufio.Reader, req uint32, ids proto.ProcStreams) attachedRun {
	t.Helper()
	run := attachedRun{ends: map[uint32]string{}}
	for len(run.ends) < 2 || run.reply == nil {
		f, err := proto.Read(r)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case f.ID == req && f.Type == proto.TypeReply:
			rep := replyOf(t, f)
			run.reply = &rep
		case f.Type == proto.TypeData && (f.ID == ids.Stdout || f.ID == ids.Stderr):
			if run.exit != nil {
				t.Fatal("output after the exit notice")
			}
			if f.ID == ids.Stdout {
				run.out = append(run.out, f.Payload...)
			} else {
				run.err = append(run.err, f.Payload...)
			}
			send(t, host, proto.CreditFrame(f.ID, len(f.Payload)))
		case f.Type == proto.TypeProcExit && f.ID == ids.Stdout:
			if len(run.ends) > 0 {
				t.Fatal("the exit notice after an End")
			}
			run.exit = &proto.ProcExit{}
			if err := json.Unmarshal(f.Payload, run.exit); err != nil {
				t.Fatal(err)
			}
		case f.Type == proto.TypeEnd && (f.ID == ids.Stdout || f.ID == ids.Stderr):
			run.ends[f.ID] = string(f.Payload)
		}
	}
	return run
}

// TestAgentProcesses: a process streamed from its first byte with its exit after its output,
// a detached one re-attached through its overflowed ring, and the refusals with their codes.
func TestAgentProcesses(t *testing.T) {
	host, r := agentPair(t)

	ids := proto.ProcStreams{Stdout: 11, Stderr: 12}
	sendProc(t, host, proto.TypeProcStart, 10, proto.ProcStart{Argv: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}, Attach: &ids})
	run := readAttachment(t, host, r, 10, ids)
	if run.reply.Error != nil || string(run.out) != "out\n" || string(run.err) != "err\n" {
		t.Fatalf("reply %+v, stdout %q, stderr %q", run.reply.Error, run.out, run.err)
	}
	if run.exit == nil || run.exit.ExitCode == nil || *run.exit.ExitCode != 3 || run.ends[11] != "" || run.ends[12] != "" {
		t.Fatalf("exit %+v, ends %v", run.exit, run.ends)
	}
	var info proto.ProcInfo
	_ = json.Unmarshal(run.reply.Result, &info)

	// Detached, seq writes far more than the ring keeps; the attachment after its exit gets
	// the ring's bytes, the count of those lost, then the exit.
	sendProc(t, host, proto.TypeProcStart, 20, proto.ProcStart{Argv: []string{"seq", "1", "5000"}, RingBytes: minRing})
	rep := replyOf(t, next(t, r, 20))
	var bg proto.ProcInfo
	if rep.Error != nil || json.Unmarshal(rep.Result, &bg) != nil || bg.ID == info.ID {
		t.Fatalf("start: %+v %s", rep.Error, rep.Result)
	}
	sendProc(t, host, proto.TypeProcWait, 21, proto.ProcRef{ID: bg.ID})
	if rep := replyOf(t, next(t, r, 21)); rep.Error != nil || string(rep.Result) != `{"exit_code":0}` {
		t.Fatalf("wait: %+v %s", rep.Error, rep.Result)
	}
	var all bytes.Buffer
	for i := 1; i <= 5000; i++ {
		all.WriteString(strconv.Itoa(i) + "\n")
	}
	ids = proto.ProcStreams{Stdout: 23, Stderr: 24}
	sendProc(t, host, proto.TypeProcAttach, 22, proto.ProcAttach{ID: bg.ID, Streams: ids})
	run = readAttachment(t, host, r, 22, ids)
	var att proto.ProcAttached
	if run.reply.Error != nil || json.Unmarshal(run.reply.Result, &att) != nil {
		t.Fatalf("attach: %+v", run.reply.Error)
	}
	if len(run.out) != minRing || !bytes.HasSuffix(all.Bytes(), run.out) || att.DroppedStdout != int64(all.Len()-minRing) || run.exit == nil {
		t.Fatalf("replayed %d bytes (suffix %v), dropped %d of %d, exit %+v", len(run.out), bytes.HasSuffix(all.Bytes(), run.out), att.DroppedStdout, all.Len(), run.exit)
	}

	for _, c := range []struct {
		typ  proto.Type
		msg  any
		code string
	}{
		{proto.TypeProcSignal, proto.ProcSignal{ID: bg.ID, Signal: 15}, vm.ProcessExited},
		{proto.TypeProcSignal, proto.ProcSignal{ID: "p404", Signal: 15}, vm.ProcessNotFound},
		{proto.TypeProcResize, proto.ProcResize{ID: bg.ID, Size: proto.TermSize{Rows: 1, Cols: 1}}, vm.ProcessNoTTY},
		{proto.TypeProcAttach, proto.ProcAttach{ID: "p404", Streams: proto.ProcStreams{Stdout: 31, Stderr: 32}}, vm.ProcessNotFound},
		{proto.TypeProcAttach, proto.ProcAttach{ID: bg.ID, Streams: proto.ProcStreams{Stdout: 31, Stderr: 32, Stdin: 33}}, vm.ProcessNoStdin},
		{proto.TypeProcStart, proto.ProcStart{Argv: []string{"true"}, RingBytes: maxRingBytes + 1}, ""},
	} {
		sendProc(t, host, c.typ, 30, c.msg)
		// An uncoded refusal: input to a process started without it, a ring over the bound.
		if rep := replyOf(t, next(t, r, 30)); rep.Error == nil || rep.Error.Code != c.code {
			t.Errorf("%+v: %+v, want code %s", c.msg, rep.Error, c.code)
		}
	}
	sendProc(t, host, proto.TypeProcList, 40, struct{}{})
	var list proto.ProcListed
	if rep := replyOf(t, next(t, r, 40)); json.Unmarshal(rep.Result, &list) != nil || len(list.Processes) != 2 || list.Processes[0].ID != info.ID || list.Processes[1].Exit == nil {
		t.Fatalf("list: %s", rep.Result)
	}
}
