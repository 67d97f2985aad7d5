package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
	"github.com/iii-go/iii/internal/base/tokens"
)

const callUsage = `Usage: iii call FUNCTION [KEY=VALUE ...] [flags]      (aliases: iii trigger, iii t)

Calls FUNCTION through a running engine and prints its result as JSON.

Payload: no arguments send {}; KEY=VALUE pairs build an object (each VALUE is read as JSON
when it parses, else as a string: a=10 name=alice -> {"a":10,"name":"alice"}); --json sends
any JSON; both together need a JSON object, and the pairs override its keys.

Flags:
  --json JSON           the payload as JSON
  -n, --namespace NS    call FUNCTION in namespace NS (default: default)
  --address HOST        engine host (default 127.0.0.1)
  --port PORT           engine port (default 49134)
  --timeout-ms N        give up after N milliseconds (default 30000)
  -h, --help            show this help

Without --address and --port the engine URL is $III_URL when set.

Token: the call presents the token in $III_TOKEN_FILE, else $III_TOKEN, else the project token
of the Compose that serves this engine and namespace for you (it lists it in
~/.iii/compose/tokens/<host>_<port>_<namespace> while it runs). Functions a worker registered
as protected, such as compose::*, answer FORBIDDEN to a call without it.
The result goes to stdout; a function error goes to stderr as JSON and the exit code is 1.
`

type callArgs struct {
	fn        string
	payload   json.RawMessage
	namespace *string
	url       string
	timeout   time.Duration
	help      bool
	getenv    func(string) string // the environment
}

func parseCall(args []string, getenv func(string) string) (*callArgs, error) {
	a := &callArgs{timeout: 30 * time.Second, getenv: getenv}
	w, err := scanCall(args, a)
	if err != nil {
		return nil, err
	}
	if a.fn == "" && !a.help {
		return nil, errors.New("missing FUNCTION. Try: `iii call <function> [key=value ...]`")
	}
	if !a.help {
		if a.payload, err = buildPayload(w.json, w.keys, w.kv); err != nil {
			return nil, err
		}
	}
	a.url = callURL(w.host, w.port, getenv(protocol.EnvURL))
	return a, nil
}

// callWords are what scanCall read besides the fields of callArgs: --json, --address, --port
// and the KEY=VALUE pairs in the order they were given (a repeated key keeps its first place).
type callWords struct {
	json       *string
	host, port string
	keys       []string
	kv         map[string]json.RawMessage
}

// scanCall reads the words of `iii call` (see Words): flags as --name value or --name=value, anywhere;
// the first bare word is FUNCTION; every other word is a KEY=VALUE pair.
func scanCall(args []string, a *callArgs) (*callWords, error) {
	w := &callWords{kv: map[string]json.RawMessage{}}
	for s := NewWords(args); s.Next(); {
		arg, name, next := s.Arg, s.Name, s.Value
		var err error
		switch {
		case arg == "-h" || arg == "--help":
			a.help = true
		case name == "--json":
			var v string
			v, err = next()
			w.json = &v
		case name == "-n" || name == "--namespace":
			var v string
			v, err = next()
			a.namespace = &v
		case name == "--address":
			w.host, err = next()
		case name == "--port":
			w.port, err = next()
		case name == "--timeout-ms":
			var v string
			if v, err = next(); err == nil {
				a.timeout, err = timeoutMS(v)
			}
		case strings.HasPrefix(arg, "-") && a.fn != "" && !strings.Contains(arg, "="):
			err = fmt.Errorf("unknown flag %s", arg)
		case a.fn == "" && !strings.Contains(arg, "=") && !strings.HasPrefix(arg, "-"):
			a.fn = arg
		default:
			err = w.addPair(arg, name, s.Val, s.HasVal)
		}
		if err != nil {
			return nil, err
		}
	}
	return w, nil
}

// userToken is the token Compose recorded for this user, engine and namespace (package
// tokens), when neither III_TOKEN_FILE nor III_TOKEN names one; "" when there is none.
func userToken(a *callArgs) string {
	ns := protocol.DefaultNamespace
	if a.namespace != nil {
		ns = *a.namespace
	}
	return tokens.ForCLI(a.url, ns, a.getenv, os.Stderr)
}

// timeoutMS reads the value of --timeout-ms.
func timeoutMS(v string) (time.Duration, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("--timeout-ms must be a positive integer, got `%s`", v)
	}
	return time.Duration(n) * time.Millisecond, nil
}

// addPair records KEY=VALUE; VALUE is taken as JSON when it parses, else as a string.
func (w *callWords) addPair(arg, key, val string, hasVal bool) error {
	if !hasVal {
		return fmt.Errorf("expected key=value, got `%s`", arg)
	}
	if key == "" {
		return fmt.Errorf("payload key must not be empty (got `%s`)", arg)
	}
	if _, dup := w.kv[key]; !dup {
		w.keys = append(w.keys, key)
	}
	if json.Valid([]byte(val)) {
		w.kv[key] = json.RawMessage(val)
	} else {
		w.kv[key], _ = json.Marshal(val)
	}
	return nil
}

// buildPayload combines --json and the pairs: {} with neither, either one alone, or the pairs
// laid over a --json object.
func buildPayload(jsonArg *string, keys []string, kv map[string]json.RawMessage) (json.RawMessage, error) {
	switch {
	case jsonArg == nil && len(kv) == 0:
		return json.RawMessage("{}"), nil
	case jsonArg != nil && !json.Valid([]byte(*jsonArg)):
		return nil, fmt.Errorf("--json: invalid JSON `%s`", *jsonArg)
	case jsonArg != nil && len(kv) == 0:
		return json.RawMessage(*jsonArg), nil
	case jsonArg == nil:
		return orderedObject(keys, kv), nil
	}
	obj := map[string]json.RawMessage{}
	if err := json.Unmarshal([]byte(*jsonArg), &obj); err != nil || obj == nil {
		return nil, errors.New("--json must be an object when combined with key=value pairs")
	}
	for _, k := range keys {
		obj[k] = kv[k]
	}
	return json.Marshal(obj)
}

// callURL is the engine to call: --address/--port (127.0.0.1:49134 for the one not given), else
// url ($III_URL), else the default address.
func callURL(host, port, url string) string {
	if host != "" || port != "" || url == "" {
		url = "ws://" + net.JoinHostPort(cmp.Or(host, "127.0.0.1"), cmp.Or(port, "49134"))
	}
	return url
}

// orderedObject renders the pairs as a JSON object in the order they were given.
func orderedObject(keys []string, kv map[string]json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteByte(':')
		b.Write(kv[k])
	}
	b.WriteByte('}')
	return b.Bytes()
}

// RunCall runs `iii call FN k=v ...` with the environment getenv (os.Getenv in the binary) and
// returns the process exit code.
func RunCall(args []string, getenv func(string) string) int {
	a, err := parseCall(args, getenv)
	if err != nil {
		return errcode.Exit(os.Stderr, errcode.Usagef(errcode.Usage, "%w", err), errcode.Usage)
	}
	if a.help {
		fmt.Print(callUsage)
		if a.fn != "" {
			describe(a)
		}
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout+2*time.Second)
	defer cancel()
	dctx, dcancel := context.WithTimeout(ctx, min(a.timeout, 5*time.Second))
	defer dcancel()
	w, err := connectCLI(dctx, a.url, "iii-cli:call", userToken(a), a.getenv)
	if err != nil {
		return errcode.Exit(os.Stderr, err, errcode.Unknown)
	}
	defer w.Close()
	var opts []protocol.CallOption
	opts = append(opts, protocol.WithTimeout(a.timeout))
	if a.namespace != nil {
		opts = append(opts, protocol.InNamespace(*a.namespace))
	}
	res, err := w.Call(ctx, a.fn, a.payload, opts...)
	if err != nil {
		var perr *protocol.Error
		if !errors.As(err, &perr) {
			return errcode.Exit(os.Stderr, errcode.New(errcode.CallFailed, "%w", err), errcode.CallFailed)
		}
		var buf bytes.Buffer
		if json.Indent(&buf, perr.Raw(), "", "  ") != nil {
			buf.Write(perr.Raw())
		}
		fmt.Fprintln(os.Stderr, buf.String())
		return 1
	}
	if string(res) == "null" {
		return 0
	}
	var buf bytes.Buffer
	if json.Indent(&buf, res, "", "  ") != nil {
		buf.Write(res)
	}
	fmt.Println(buf.String())
	return 0
}

// EngineURL is the engine a command-line client talks to: flag (an --engine URL) when given,
// else $III_URL, else ws://127.0.0.1:49134.
func EngineURL(flag string, getenv func(string) string) string {
	return callURL("", "", cmp.Or(flag, getenv(protocol.EnvURL)))
}

// ConnectCLI connects a command-line client called name to the engine at url, as `iii call`
// does: in the default namespace, presenting the token in $III_TOKEN_FILE, else $III_TOKEN, else
// the one Compose recorded for this user, engine and namespace (package tokens), without
// reconnecting. Nothing answering is EngineUnreachable.
func ConnectCLI(ctx context.Context, url, name, namespace string, getenv func(string) string) (*protocol.Worker, error) {
	return connectCLI(ctx, url, name, tokens.ForCLI(url, namespace, getenv, os.Stderr), getenv)
}

func connectCLI(ctx context.Context, url, name, token string, getenv func(string) string) (*protocol.Worker, error) {
	w, err := protocol.Connect(ctx, protocol.Config{URL: url, Name: name, Namespace: protocol.DefaultNamespace,
		Token: token, NoReconnect: true}.FromEnv(getenv))
	if err != nil {
		return nil, errcode.New(errcode.EngineUnreachable, "no engine answered at %s (%w). Is the engine running at that address and port?", url, err)
	}
	return w, nil
}

// describe prints what the running engine knows about a.fn; silent when no engine answers.
func describe(a *callArgs) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	w, err := protocol.Connect(ctx, protocol.Config{URL: a.url, Name: "iii-cli:call", Namespace: protocol.DefaultNamespace, NoReconnect: true}.FromEnv(a.getenv))
	if err != nil {
		return
	}
	defer w.Close()
	ns := protocol.DefaultNamespace
	if a.namespace != nil {
		ns = *a.namespace
	}
	out, err := w.Call(ctx, protocol.FnListFunctions, map[string]string{"namespace": ns})
	if err != nil {
		return
	}
	var res struct {
		Functions []struct {
			FunctionID     string          `json:"function_id"`
			Description    string          `json:"description"`
			RequestFormat  json.RawMessage `json:"request_format"`
			ResponseFormat json.RawMessage `json:"response_format"`
		} `json:"functions"`
	}
	_ = json.Unmarshal(out, &res)
	for _, f := range res.Functions {
		if f.FunctionID != a.fn {
			continue
		}
		fmt.Printf("\n%s (namespace %s, engine %s)\n", f.FunctionID, ns, a.url)
		if f.Description != "" {
			fmt.Printf("  %s\n", f.Description)
		}
		for _, s := range []struct {
			name string
			raw  json.RawMessage
		}{{"request", f.RequestFormat}, {"response", f.ResponseFormat}} {
			var buf bytes.Buffer
			if len(s.raw) > 0 && string(s.raw) != "null" && json.Indent(&buf, s.raw, "  ", "  ") == nil {
				fmt.Printf("  %s format: %s\n", s.name, buf.String())
			}
		}
		return
	}
	fmt.Printf("\n%s is not registered in namespace %s at %s\n", a.fn, ns, a.url)
}
