package cli

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/iii-go/iii/compose/errcode"
)

func TestFlagRules(t *testing.T) {
	cases := []struct {
		args []string
		code string
	}{
		{[]string{"-f", "x.yaml"}, errcode.FileRequiresUp},
		{[]string{"--file=x.yaml", "--engine", "ws://h:1"}, errcode.FileRequiresUp},
		{[]string{"--frozen"}, errcode.FrozenRequiresUp},
		{[]string{"build", "--up"}, errcode.BuildConflictsWithServeOptions},
		{[]string{"build", "-n", "shop"}, errcode.BuildConflictsWithServeOptions},
		{[]string{"build", "--engine=ws://h:1"}, errcode.BuildConflictsWithServeOptions},
		{[]string{"--up", "--namespace", "Bad"}, errcode.InvalidNamespace},
		{[]string{"--up", "--nope"}, errcode.UsageError},
		{[]string{"--engine"}, errcode.UsageError},
	}
	for _, c := range cases {
		var out, errb bytes.Buffer
		code := run(context.Background(), "test", c.args, &out, &errb, os.LookupEnv, nil)
		if code == 0 || !strings.HasPrefix(errb.String(), "error["+c.code+"]: ") {
			t.Errorf("%v: exit %d, stderr %q; want error[%s]", c.args, code, errb.String(), c.code)
		}
	}
	o, err := parse([]string{"build", "-f", "a.yaml", "--frozen"})
	if err != nil || !o.build || !o.frozen || o.file != "a.yaml" || o.check() != nil {
		t.Fatalf("build flags: %+v %v", o, err)
	}
	o, err = parse([]string{"--engine=ws://h:1", "-n", "shop", "--up", "--file=b.yaml"})
	if err != nil || o.engine != "ws://h:1" || o.namespace != "shop" || !o.up || o.file != "b.yaml" || o.check() != nil {
		t.Fatalf("daemon flags: %+v %v", o, err)
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"build", "-h"}, {"--up", "help"}} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), "test", args, &out, &errb, os.LookupEnv, nil); code != 0 || !strings.Contains(out.String(), "iii compose build [-f FILE] [--frozen]") {
			t.Errorf("%v: exit %d, %q", args, code, out.String())
		}
	}
}

// TestUpSubcommand: iii's `up` subcommand is --up, with the global flags before or after it.
func TestUpSubcommand(t *testing.T) {
	for _, args := range [][]string{
		{"--namespace", "sdk-config-test", "up", "--file", "c.yaml"},
		{"--engine", "ws://h:1", "--namespace", "sdk-config-test", "up", "--file", "c.yaml"},
		{"up", "-f", "c.yaml", "-n", "sdk-config-test", "--engine=ws://h:1"},
		{"-n", "sdk-config-test", "up", "--file=c.yaml", "--frozen"},
	} {
		o, err := parse(args)
		if err != nil || !o.up || !o.upWord || o.file != "c.yaml" || o.namespace != "sdk-config-test" || o.check() != nil {
			t.Errorf("%v: %+v %v", args, o, err)
		}
	}
	o, err := parse([]string{"up"})
	if err != nil || !o.up || o.file != DefaultFile || o.check() != nil {
		t.Errorf("bare up: %+v %v", o, err)
	}
	for _, args := range [][]string{{"up", "up"}, {"build", "up"}, {"up", "down"}, {"up", "--nope"}} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), "test", args, &out, &errb, os.LookupEnv, nil); code == 0 || !strings.HasPrefix(errb.String(), "error[USAGE_ERROR]: ") {
			t.Errorf("%v: exit %d, stderr %q; want USAGE_ERROR", args, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run(context.Background(), "test", []string{"-n", "x", "up", "--help"}, &out, &errb, os.LookupEnv, nil); code != 0 || !strings.Contains(out.String(), "iii compose [--engine URL] [-n NS] up [-f FILE]") {
		t.Errorf("up --help: exit %d, %q", code, out.String())
	}
}
