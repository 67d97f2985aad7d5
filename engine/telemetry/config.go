package telemetry

import (
	"fmt"
	"math"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"github.com/iii-go/iii/internal/base/errcode"
)

// Config is the iii-observability worker's configuration: iii's keys and defaults (those of
// the worker iii injects), plus this engine's byte bounds and Prometheus listener.
type Config struct {
	Enabled          bool    // enabled: false turns the whole worker's ingest off
	ServiceName      string  // service_name
	ServiceVersion   string  // service_version
	ServiceNamespace string  // service_namespace
	Exporter         string  // exporter: memory | otlp | both (traces)
	Endpoint         string  // endpoint: the OTLP/HTTP collector's base URL
	SamplingRatio    float64 // sampling_ratio of the engine's own spans, 0..1

	MemoryMaxSpans int // memory_max_spans
	MemoryMaxBytes int // memory_max_bytes (this engine's): the spans' estimated bytes

	MetricsEnabled          bool   // metrics_enabled
	MetricsExporter         string // metrics_exporter: memory | prometheus (this engine's)
	MetricsRetentionSeconds int    // metrics_retention_seconds
	MetricsMaxCount         int    // metrics_max_count
	MetricsMaxBytes         int    // metrics_max_bytes (this engine's)
	PrometheusHost          string // prometheus_host (this engine's)
	PrometheusPort          int    // prometheus_port (this engine's)

	LogsEnabled          bool    // logs_enabled
	LogsExporter         string  // logs_exporter: memory
	LogsMaxCount         int     // logs_max_count
	LogsMaxBytes         int     // logs_max_bytes (this engine's)
	LogsRetentionSeconds int     // logs_retention_seconds
	LogsSamplingRatio    float64 // logs_sampling_ratio, 0..1
	LogsConsoleOutput    bool    // logs_console_output: print ingested logs on stderr
	Level                string  // level: the lowest severity kept (trace, debug, info, warn, error)
	Format               string  // format of the console output: default | json
}

// Defaults, iii's for the injected worker unless marked as this engine's.
const (
	DefaultServiceName      = "iii"
	DefaultEndpoint         = "http://localhost:4318"
	DefaultMemoryMaxSpans   = 1_000_000
	DefaultMemoryMaxBytes   = 64 << 20 // this engine's
	DefaultMetricsMaxCount  = 10_000
	DefaultMetricsMaxBytes  = 8 << 20 // this engine's
	DefaultMetricsRetention = 3600
	DefaultLogsMaxCount     = 1000
	DefaultLogsMaxBytes     = 8 << 20 // this engine's
	DefaultLogsRetention    = 3600
	DefaultPrometheusHost   = "127.0.0.1"
	DefaultPrometheusPort   = 9464
)

// DefaultConfig is the configuration of the worker when config.yaml says nothing of it.
func DefaultConfig(version string) Config {
	return Config{Enabled: true, ServiceName: DefaultServiceName, ServiceVersion: version, Exporter: "memory", Endpoint: DefaultEndpoint,
		SamplingRatio: 1, MemoryMaxSpans: DefaultMemoryMaxSpans, MemoryMaxBytes: DefaultMemoryMaxBytes,
		MetricsEnabled: true, MetricsExporter: "memory", MetricsRetentionSeconds: DefaultMetricsRetention,
		MetricsMaxCount: DefaultMetricsMaxCount, MetricsMaxBytes: DefaultMetricsMaxBytes,
		PrometheusHost: DefaultPrometheusHost, PrometheusPort: DefaultPrometheusPort,
		LogsEnabled: true, LogsExporter: "memory", LogsMaxCount: DefaultLogsMaxCount, LogsMaxBytes: DefaultLogsMaxBytes,
		LogsRetentionSeconds: DefaultLogsRetention, LogsSamplingRatio: 1, LogsConsoleOutput: true, Level: "trace", Format: "default"}
}

// unsupportedKeys are iii's keys this engine does not implement: refused, never ignored.
var unsupportedKeys = map[string]string{
	"sampling":               "advanced sampling rules",
	"live_spans":             "pending span snapshots",
	"trace_storage":          "the SQLite trace archive",
	"logs_batch_size":        "OTLP log export",
	"logs_flush_interval_ms": "OTLP log export",
	"alerts":                 "alert rules",
	"collapse_spans":         "span collapse rules",
}

// ParseConfig reads a config block (config.yaml's iii-observability config, or the stored
// configuration entry of that id) over base. Unknown keys are CONFIG_INVALID; iii's keys this
// engine does not implement are CONFIG_UNSUPPORTED.
func ParseConfig(base Config, m map[string]any) (Config, error) {
	c := base
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := c.set(k, m[k]); err != nil {
			return base, err
		}
	}
	return c, nil
}

// set sets the key k of a config block to v; a key none of the setters knows is unsupported
// (one of iii's) or invalid.
func (c *Config) set(k string, v any) error {
	if known, err := c.setTracing(k, v); known {
		return err
	}
	if known, err := c.setMetrics(k, v); known {
		return err
	}
	if known, err := c.setLogs(k, v); known {
		return err
	}
	if what, ok := unsupportedKeys[k]; ok {
		return unsupported(fmt.Sprintf("key %q (%s)", k, what))
	}
	return invalid("unknown key %q; see the README's Observability section for the keys", k)
}

// setTracing sets k to v when k is a key of the service or its traces, and reports whether it
// was one.
func (c *Config) setTracing(k string, v any) (known bool, err error) {
	switch k {
	case "enabled":
		c.Enabled, err = boolOf(k, v)
	case "service_name":
		c.ServiceName, err = strOf(k, v)
	case "service_version":
		c.ServiceVersion, err = strOf(k, v)
	case "service_namespace":
		c.ServiceNamespace, err = strOf(k, v)
	case "exporter":
		c.Exporter, err = oneOf(k, v, "memory", "otlp", "both")
	case "endpoint":
		if c.Endpoint, err = strOf(k, v); err == nil {
			u, perr := url.Parse(c.Endpoint)
			if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				err = invalid("endpoint %q must be an http:// or https:// URL of an OTLP/HTTP collector, e.g. http://localhost:4318", c.Endpoint)
			}
		}
	case "sampling_ratio":
		c.SamplingRatio, err = ratioOf(k, v)
	case "memory_max_spans":
		c.MemoryMaxSpans, err = countOf(k, v)
	case "memory_max_bytes":
		c.MemoryMaxBytes, err = countOf(k, v)
	default:
		return false, nil
	}
	return true, err
}

// setMetrics sets k to v when k is a key of the metrics (metrics_*, prometheus_*), and reports
// whether it was one.
func (c *Config) setMetrics(k string, v any) (known bool, err error) {
	switch k {
	case "metrics_enabled":
		c.MetricsEnabled, err = boolOf(k, v)
	case "metrics_exporter":
		if s, _ := v.(string); s == "otlp" {
			err = unsupported("metrics_exporter: otlp (OTLP metric export); use memory, or prometheus for a /metrics endpoint")
		} else {
			c.MetricsExporter, err = oneOf(k, v, "memory", "prometheus")
		}
	case "metrics_retention_seconds":
		c.MetricsRetentionSeconds, err = countOf(k, v)
	case "metrics_max_count":
		c.MetricsMaxCount, err = countOf(k, v)
	case "metrics_max_bytes":
		c.MetricsMaxBytes, err = countOf(k, v)
	case "prometheus_host":
		c.PrometheusHost, err = strOf(k, v)
	case "prometheus_port":
		if c.PrometheusPort, err = countOf(k, v); err == nil && c.PrometheusPort > 65535 {
			err = invalid("prometheus_port %d is not a TCP port", c.PrometheusPort)
		}
	default:
		return false, nil
	}
	return true, err
}

// setLogs sets k to v when k is a key of the logs (logs_*, level, format), and reports whether
// it was one.
func (c *Config) setLogs(k string, v any) (known bool, err error) {
	switch k {
	case "logs_enabled":
		c.LogsEnabled, err = boolOf(k, v)
	case "logs_exporter":
		if s, _ := v.(string); s == "otlp" || s == "both" {
			err = unsupported("logs_exporter: " + s + " (OTLP log export); logs are kept in memory")
		} else {
			c.LogsExporter, err = oneOf(k, v, "memory")
		}
	case "logs_max_count":
		c.LogsMaxCount, err = countOf(k, v)
	case "logs_max_bytes":
		c.LogsMaxBytes, err = countOf(k, v)
	case "logs_retention_seconds":
		c.LogsRetentionSeconds, err = countOf(k, v)
	case "logs_sampling_ratio":
		c.LogsSamplingRatio, err = ratioOf(k, v)
	case "logs_console_output":
		c.LogsConsoleOutput, err = boolOf(k, v)
	case "level":
		c.Level, err = oneOf(k, v, "trace", "debug", "info", "warn", "error")
	case "format":
		c.Format, err = oneOf(k, v, "default", "json")
	default:
		return false, nil
	}
	return true, err
}

func invalid(format string, args ...any) error {
	return &errcode.Error{Code: errcode.ConfigInvalid, Message: "iii-observability config: " + fmt.Sprintf(format, args...)}
}

func unsupported(what string) error {
	return &errcode.Error{Code: errcode.ConfigUnsupported, Message: "iii-observability config: " + what +
		" is not supported; this engine does not implement it and refuses to start rather than ignore it"}
}

func boolOf(k string, v any) (bool, error) {
	switch v { // a ${VAR:default} placeholder, expanded to text
	case "true":
		v = true
	case "false":
		v = false
	}
	b, ok := v.(bool)
	if !ok {
		return false, invalid("%s must be true or false", k)
	}
	return b, nil
}

func strOf(k string, v any) (string, error) {
	s, ok := v.(string)
	if !ok || strings.TrimSpace(s) == "" {
		return "", invalid("%s must be a non-empty string", k)
	}
	return s, nil
}

func oneOf(k string, v any, allowed ...string) (string, error) {
	s, _ := v.(string)
	for _, a := range allowed {
		if s == a {
			return s, nil
		}
	}
	return "", invalid("%s must be one of %s, not %v", k, strings.Join(allowed, ", "), v)
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	case uint64:
		return float64(n), true
	case float64:
		return n, true
	case string: // a ${VAR:default} placeholder, expanded to text
		f, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
		return f, err == nil
	}
	return 0, false
}

func ratioOf(k string, v any) (float64, error) {
	f, ok := number(v)
	if !ok || math.IsNaN(f) || f < 0 || f > 1 {
		return 0, invalid("%s must be a number from 0 to 1", k)
	}
	return f, nil
}

func countOf(k string, v any) (int, error) {
	f, ok := number(v)
	if !ok || f < 1 || f != math.Trunc(f) || f > math.MaxInt32*float64(1<<20) {
		return 0, invalid("%s must be a whole number of at least 1", k)
	}
	return int(f), nil
}
