package testscripts

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/iii-go/iii/engine/protocol"
)

func init() {
	registerCmd("chanwrite", cmdChanWrite)
	registerCmd("chanread", cmdChanRead)
	registerCmd("randfile", cmdRandFile)
	registerCmd("b64env", cmdB64Env)
}

// chanTimeout bounds one chanread, and a chanwrite stream nobody reads.
const chanTimeout = 60 * time.Second

// chanwrite [-abort=REASON] FILE VAR: create a channel at $III_URL, write FILE into its write end
// in the background (then close it, or abort it with REASON), and set VAR to the read end's ref
// as compact JSON. The writer ends with the script at the latest.
func cmdChanWrite(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("chanwrite", flag.ContinueOnError)
	abort := fs.String("abort", "", "")
	if neg || fs.Parse(args) != nil || fs.NArg() != 2 {
		ts.Fatalf("usage: chanwrite [-abort=REASON] FILE VAR")
	}
	data, err := os.ReadFile(ts.MkAbs(fs.Arg(0)))
	ts.Check(err)
	url := ts.Getenv("III_URL")
	if url == "" {
		ts.Fatalf("chanwrite: III_URL is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), chanTimeout)
	w, err := protocol.Connect(ctx, protocol.Config{URL: url, Name: "chanwrite", Namespace: protocol.DefaultNamespace, NoReconnect: true, TokenFile: os.DevNull})
	if err != nil {
		cancel()
		ts.Fatalf("chanwrite: %v", err)
	}
	rref, wref, err := w.CreateChannel(ctx)
	w.Close()
	if err != nil {
		cancel()
		ts.Fatalf("chanwrite: %v", err)
	}
	wr, err := protocol.DialWriter(ctx, url, wref)
	if err != nil {
		cancel()
		ts.Fatalf("chanwrite: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := wr.Write(data); err != nil {
			return
		}
		if *abort != "" {
			wr.Abort(*abort)
			return
		}
		wr.Close()
	}()
	ts.Defer(func() { cancel(); <-done })
	b, _ := json.Marshal(rref)
	ts.Setenv(fs.Arg(1), string(b))
}

// chanread [-key=KEY] REF OUTFILE: read the channel whose read ref is REF (a JSON object, or a
// file such as stdout holding one) from $III_URL into OUTFILE until the writer closes it; -key
// presents KEY instead of the ref's access_key. A failure (refused ref, aborted channel) goes to
// stderr; ! chanread expects one.
func cmdChanRead(ts *testscript.TestScript, neg bool, args []string) {
	fs := flag.NewFlagSet("chanread", flag.ContinueOnError)
	key := fs.String("key", "", "")
	if fs.Parse(args) != nil || fs.NArg() != 2 {
		ts.Fatalf("usage: chanread [-key=KEY] REF OUTFILE")
	}
	src := fs.Arg(0)
	if !strings.HasPrefix(strings.TrimSpace(src), "{") {
		src = ts.ReadFile(src)
	}
	var ref protocol.ChannelRef
	if err := json.Unmarshal([]byte(src), &ref); err != nil {
		ts.Fatalf("chanread: %s is not a channel ref: %v", fs.Arg(0), err)
	}
	if *key != "" {
		ref.AccessKey = *key
	}
	err := readChannel(ts.Getenv("III_URL"), ref, ts.MkAbs(fs.Arg(1)))
	if err != nil {
		fmt.Fprintf(ts.Stderr(), "chanread: %v\n", err)
	}
	switch {
	case err != nil && !neg:
		ts.Fatalf("chanread: %v", err)
	case err == nil && neg:
		ts.Fatalf("chanread: the channel was read to its end")
	}
}

func readChannel(url string, ref protocol.ChannelRef, out string) error {
	ctx, cancel := context.WithTimeout(context.Background(), chanTimeout)
	defer cancel()
	rd, err := protocol.DialReader(ctx, url, ref)
	if err != nil {
		return err
	}
	defer rd.Close()
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, rd)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// randfile FILE SIZE: write SIZE random bytes to FILE.
func cmdRandFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: randfile FILE SIZE")
	}
	n, err := strconv.Atoi(args[1])
	if err != nil || n < 0 {
		ts.Fatalf("randfile: bad size %q", args[1])
	}
	b := make([]byte, n)
	_, _ = rand.Read(b)
	ts.Check(os.WriteFile(ts.MkAbs(args[0]), b, 0o644))
}

// b64env FILE VAR: set VAR to FILE's bytes in standard base64 (one argument holds at most
// 128 KiB, so keep FILE under 96 KiB when VAR goes on a command line).
func cmdB64Env(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: b64env FILE VAR")
	}
	b, err := os.ReadFile(ts.MkAbs(args[0]))
	ts.Check(err)
	ts.Setenv(args[1], base64.StdEncoding.EncodeToString(b))
}
