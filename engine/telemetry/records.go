package telemetry

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Span is one stored span, iii's StoredSpan: attributes are [key, value] string pairs; status is
// "ok", "error" or "unset".
type Span struct {
	TraceID                     string      `json:"trace_id"`
	SpanID                      string      `json:"span_id"`
	ParentSpanID                *string     `json:"parent_span_id"`
	Name                        string      `json:"name"`
	StartTimeUnixNano           uint64      `json:"start_time_unix_nano"`
	EndTimeUnixNano             uint64      `json:"end_time_unix_nano"`
	Status                      string      `json:"status"`
	StatusDescription           string      `json:"status_description,omitempty"`
	Attributes                  [][2]string `json:"attributes"`
	ServiceName                 string      `json:"service_name"`
	Events                      []SpanEvent `json:"events"`
	Links                       []SpanLink  `json:"links"`
	InstrumentationScopeName    string      `json:"instrumentation_scope_name,omitempty"`
	InstrumentationScopeVersion string      `json:"instrumentation_scope_version,omitempty"`
	Flags                       *uint32     `json:"flags,omitempty"`
	Kind                        int         `json:"-"`
}

// SpanEvent is an event of a span.
type SpanEvent struct {
	Name              string      `json:"name"`
	TimestampUnixNano uint64      `json:"timestamp_unix_nano"`
	Attributes        [][2]string `json:"attributes"`
}

// SpanLink is a link of a span to another.
type SpanLink struct {
	TraceID    string      `json:"trace_id"`
	SpanID     string      `json:"span_id"`
	TraceState string      `json:"trace_state,omitempty"`
	Attributes [][2]string `json:"attributes"`
}

// Attr returns the value of attribute k ("" when absent).
func (s *Span) Attr(k string) string {
	for _, a := range s.Attributes {
		if a[0] == k {
			return a[1]
		}
	}
	return ""
}

// Log is one stored log record, the payload iii's log trigger fires with.
type Log struct {
	TimestampUnixNano           uint64         `json:"timestamp_unix_nano"`
	ObservedTimestampUnixNano   uint64         `json:"observed_timestamp_unix_nano"`
	SeverityNumber              int            `json:"severity_number"`
	SeverityText                string         `json:"severity_text"`
	Body                        string         `json:"body"`
	Attributes                  map[string]any `json:"attributes"`
	TraceID                     string         `json:"trace_id"`
	SpanID                      string         `json:"span_id"`
	Resource                    map[string]any `json:"resource"`
	ServiceName                 string         `json:"service_name"`
	InstrumentationScopeName    string         `json:"instrumentation_scope_name"`
	InstrumentationScopeVersion string         `json:"instrumentation_scope_version"`
	WorkerID                    string         `json:"worker_id,omitempty"` // the connection it came on, when a worker's
}

// MetricPoint is one stored SDK metric data point.
type MetricPoint struct {
	Name              string         `json:"name"`
	Description       string         `json:"description,omitempty"`
	Unit              string         `json:"unit,omitempty"`
	Type              string         `json:"type"` // gauge, sum or histogram
	Value             float64        `json:"value"`
	Count             uint64         `json:"count,omitempty"` // histogram: observations
	Attributes        map[string]any `json:"attributes"`
	TimestampUnixNano uint64         `json:"timestamp_unix_nano"`
	ServiceName       string         `json:"service_name"`
	WorkerID          string         `json:"worker_id,omitempty"`
}

// Per-record overhead of the size estimates: struct headers, slice and map headers, pointers.
// Calibrated on amd64 (TestLogsBound): the heap a store holds stays within 1.5 times its
// estimated bytes.
const (
	recordOverhead = 320
	attrOverhead   = 48
	mapOverhead    = 208
)

func pairsSize(a [][2]string) int {
	n := 0
	for _, p := range a {
		n += attrOverhead + len(p[0]) + len(p[1])
	}
	return n
}

func mapSize(m map[string]any) int {
	if m == nil {
		return 0
	}
	n := mapOverhead
	for k, v := range m {
		n += attrOverhead + len(k)
		switch v := v.(type) {
		case string:
			n += len(v)
		case map[string]any:
			n += mapSize(v)
		default:
			n += 16
		}
	}
	return n
}

// size estimates the bytes s holds.
func (s *Span) size() int {
	n := recordOverhead + len(s.TraceID) + len(s.SpanID) + len(s.Name) + len(s.StatusDescription) + len(s.ServiceName) +
		len(s.InstrumentationScopeName) + len(s.InstrumentationScopeVersion) + pairsSize(s.Attributes)
	if s.ParentSpanID != nil {
		n += len(*s.ParentSpanID)
	}
	for _, e := range s.Events {
		n += attrOverhead + len(e.Name) + pairsSize(e.Attributes)
	}
	for _, l := range s.Links {
		n += attrOverhead + len(l.TraceID) + len(l.SpanID) + len(l.TraceState) + pairsSize(l.Attributes)
	}
	return n
}

func (l *Log) size() int {
	return recordOverhead + len(l.SeverityText) + len(l.Body) + len(l.TraceID) + len(l.SpanID) + len(l.ServiceName) +
		len(l.InstrumentationScopeName) + len(l.InstrumentationScopeVersion) + len(l.WorkerID) + mapSize(l.Attributes) + mapSize(l.Resource)
}

func (m *MetricPoint) size() int {
	return recordOverhead + len(m.Name) + len(m.Description) + len(m.Unit) + len(m.Type) + len(m.ServiceName) + len(m.WorkerID) + mapSize(m.Attributes)
}

// The OTLP/JSON shapes the SDKs send (protobuf JSON mapping: camelCase keys, trace and span ids
// in hex, 64-bit integers as strings or numbers).

type otlpAny struct {
	StringValue *string                     `json:"stringValue"`
	BoolValue   *bool                       `json:"boolValue"`
	IntValue    *json.Number                `json:"intValue"`
	DoubleValue *json.Number                `json:"doubleValue"`
	ArrayValue  *struct{ Values []otlpAny } `json:"arrayValue"`
	KvlistValue *struct{ Values []otlpKV }  `json:"kvlistValue"`
	BytesValue  *string                     `json:"bytesValue"`
}

type otlpKV struct {
	Key   string  `json:"key"`
	Value otlpAny `json:"value"`
}

type otlpResource struct {
	Attributes []otlpKV `json:"attributes"`
}

type otlpScope struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// num is a protobuf JSON 64-bit integer: a number or a string.
type num uint64

func (n *num) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "" || s == "null" {
		return nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil {
			return fmt.Errorf("not an integer: %s", s)
		}
		v = uint64(f)
	}
	*n = num(v)
	return nil
}

func (v otlpAny) value() any {
	switch {
	case v.StringValue != nil:
		return *v.StringValue
	case v.BoolValue != nil:
		return *v.BoolValue
	case v.IntValue != nil:
		if i, err := v.IntValue.Int64(); err == nil {
			return i
		}
		return v.IntValue.String()
	case v.DoubleValue != nil:
		f, _ := v.DoubleValue.Float64()
		return f
	case v.ArrayValue != nil:
		out := make([]any, 0, len(v.ArrayValue.Values))
		for _, e := range v.ArrayValue.Values {
			out = append(out, e.value())
		}
		return out
	case v.KvlistValue != nil:
		return kvMap(v.KvlistValue.Values)
	case v.BytesValue != nil:
		return *v.BytesValue
	}
	return nil
}

// text is the value as a string, as iii's attribute pairs hold it.
func (v otlpAny) text() string {
	switch x := v.value().(type) {
	case string:
		return x
	case nil:
		return ""
	case bool, int64, float64:
		return fmt.Sprint(x)
	default:
		b, _ := json.Marshal(x)
		return string(b)
	}
}

func kvMap(kvs []otlpKV) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value.value()
	}
	return m
}

func kvPairs(kvs []otlpKV) [][2]string {
	out := make([][2]string, 0, len(kvs))
	for _, kv := range kvs {
		out = append(out, [2]string{kv.Key, kv.Value.text()})
	}
	return out
}

func serviceOf(r otlpResource) string {
	for _, kv := range r.Attributes {
		if kv.Key == "service.name" {
			return kv.Value.text()
		}
	}
	return ""
}

type otlpTraces struct {
	ResourceSpans []struct {
		Resource   otlpResource `json:"resource"`
		ScopeSpans []struct {
			Scope otlpScope `json:"scope"`
			Spans []struct {
				TraceID           string   `json:"traceId"`
				SpanID            string   `json:"spanId"`
				ParentSpanID      string   `json:"parentSpanId"`
				TraceState        string   `json:"traceState"`
				Flags             *uint32  `json:"flags"`
				Name              string   `json:"name"`
				Kind              int      `json:"kind"`
				StartTimeUnixNano num      `json:"startTimeUnixNano"`
				EndTimeUnixNano   num      `json:"endTimeUnixNano"`
				Attributes        []otlpKV `json:"attributes"`
				Events            []struct {
					TimeUnixNano num      `json:"timeUnixNano"`
					Name         string   `json:"name"`
					Attributes   []otlpKV `json:"attributes"`
				} `json:"events"`
				Links []struct {
					TraceID    string   `json:"traceId"`
					SpanID     string   `json:"spanId"`
					TraceState string   `json:"traceState"`
					Attributes []otlpKV `json:"attributes"`
				} `json:"links"`
				Status struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"status"`
			} `json:"spans"`
		} `json:"scopeSpans"`
	} `json:"resourceSpans"`
}

// parseTraces decodes an OTLP/JSON ExportTraceServiceRequest.
func parseTraces(body []byte) ([]Span, error) {
	var req otlpTraces
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	var out []Span
	for _, rs := range req.ResourceSpans {
		svc := serviceOf(rs.Resource)
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				s := Span{TraceID: strings.ToLower(sp.TraceID), SpanID: strings.ToLower(sp.SpanID), Name: sp.Name,
					StartTimeUnixNano: uint64(sp.StartTimeUnixNano), EndTimeUnixNano: uint64(sp.EndTimeUnixNano),
					Attributes: kvPairs(sp.Attributes), ServiceName: svc, Events: []SpanEvent{}, Links: []SpanLink{},
					InstrumentationScopeName: ss.Scope.Name, InstrumentationScopeVersion: ss.Scope.Version, Flags: sp.Flags, Kind: sp.Kind}
				if p := strings.ToLower(sp.ParentSpanID); p != "" && strings.Trim(p, "0") != "" {
					s.ParentSpanID = &p
				}
				switch sp.Status.Code {
				case 1:
					s.Status = "ok"
				case 2:
					s.Status, s.StatusDescription = "error", sp.Status.Message
				default:
					s.Status = "unset"
				}
				for _, e := range sp.Events {
					s.Events = append(s.Events, SpanEvent{Name: e.Name, TimestampUnixNano: uint64(e.TimeUnixNano), Attributes: kvPairs(e.Attributes)})
				}
				for _, l := range sp.Links {
					s.Links = append(s.Links, SpanLink{TraceID: strings.ToLower(l.TraceID), SpanID: strings.ToLower(l.SpanID), TraceState: l.TraceState, Attributes: kvPairs(l.Attributes)})
				}
				if s.TraceID == "" || s.SpanID == "" {
					continue
				}
				out = append(out, s)
			}
		}
	}
	return out, nil
}

type otlpLogs struct {
	ResourceLogs []struct {
		Resource  otlpResource `json:"resource"`
		ScopeLogs []struct {
			Scope      otlpScope `json:"scope"`
			LogRecords []struct {
				TimeUnixNano         num      `json:"timeUnixNano"`
				ObservedTimeUnixNano num      `json:"observedTimeUnixNano"`
				SeverityNumber       int      `json:"severityNumber"`
				SeverityText         string   `json:"severityText"`
				Body                 otlpAny  `json:"body"`
				Attributes           []otlpKV `json:"attributes"`
				TraceID              string   `json:"traceId"`
				SpanID               string   `json:"spanId"`
			} `json:"logRecords"`
		} `json:"scopeLogs"`
	} `json:"resourceLogs"`
}

// parseLogs decodes an OTLP/JSON ExportLogsServiceRequest.
func parseLogs(body []byte) ([]Log, error) {
	var req otlpLogs
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	var out []Log
	for _, rl := range req.ResourceLogs {
		res := kvMap(rl.Resource.Attributes)
		svc := serviceOf(rl.Resource)
		for _, sl := range rl.ScopeLogs {
			for _, lr := range sl.LogRecords {
				l := Log{TimestampUnixNano: uint64(lr.TimeUnixNano), ObservedTimestampUnixNano: uint64(lr.ObservedTimeUnixNano),
					SeverityNumber: lr.SeverityNumber, SeverityText: lr.SeverityText, Body: lr.Body.text(), Attributes: kvMap(lr.Attributes),
					TraceID: strings.ToLower(lr.TraceID), SpanID: strings.ToLower(lr.SpanID), Resource: res, ServiceName: svc,
					InstrumentationScopeName: sl.Scope.Name, InstrumentationScopeVersion: sl.Scope.Version}
				if l.SeverityText == "" {
					l.SeverityText = severityText(l.SeverityNumber)
				}
				if l.TimestampUnixNano == 0 {
					l.TimestampUnixNano = l.ObservedTimestampUnixNano
				}
				out = append(out, l)
			}
		}
	}
	return out, nil
}

type otlpNumberPoint struct {
	Attributes   []otlpKV     `json:"attributes"`
	TimeUnixNano num          `json:"timeUnixNano"`
	AsDouble     *json.Number `json:"asDouble"`
	AsInt        *json.Number `json:"asInt"`
}

type otlpMetrics struct {
	ResourceMetrics []struct {
		Resource     otlpResource `json:"resource"`
		ScopeMetrics []struct {
			Metrics []struct {
				Name        string `json:"name"`
				Description string `json:"description"`
				Unit        string `json:"unit"`
				Gauge       *struct {
					DataPoints []otlpNumberPoint `json:"dataPoints"`
				} `json:"gauge"`
				Sum *struct {
					DataPoints []otlpNumberPoint `json:"dataPoints"`
				} `json:"sum"`
				Histogram *struct {
					DataPoints []struct {
						Attributes   []otlpKV     `json:"attributes"`
						TimeUnixNano num          `json:"timeUnixNano"`
						Count        num          `json:"count"`
						Sum          *json.Number `json:"sum"`
					} `json:"dataPoints"`
				} `json:"histogram"`
			} `json:"metrics"`
		} `json:"scopeMetrics"`
	} `json:"resourceMetrics"`
}

// parseMetrics decodes an OTLP/JSON ExportMetricsServiceRequest into data points.
func parseMetrics(body []byte) ([]MetricPoint, error) {
	var req otlpMetrics
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, err
	}
	var out []MetricPoint
	for _, rm := range req.ResourceMetrics {
		svc := serviceOf(rm.Resource)
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				add := func(typ string, pts []otlpNumberPoint) {
					for _, p := range pts {
						var v float64
						switch {
						case p.AsDouble != nil:
							v, _ = p.AsDouble.Float64()
						case p.AsInt != nil:
							v, _ = p.AsInt.Float64()
						}
						out = append(out, MetricPoint{Name: m.Name, Description: m.Description, Unit: m.Unit, Type: typ, Value: v,
							Attributes: kvMap(p.Attributes), TimestampUnixNano: uint64(p.TimeUnixNano), ServiceName: svc})
					}
				}
				switch {
				case m.Gauge != nil:
					add("gauge", m.Gauge.DataPoints)
				case m.Sum != nil:
					add("sum", m.Sum.DataPoints)
				case m.Histogram != nil:
					for _, p := range m.Histogram.DataPoints {
						var sum float64
						if p.Sum != nil {
							sum, _ = p.Sum.Float64()
						}
						out = append(out, MetricPoint{Name: m.Name, Description: m.Description, Unit: m.Unit, Type: "histogram", Value: sum,
							Count: uint64(p.Count), Attributes: kvMap(p.Attributes), TimestampUnixNano: uint64(p.TimeUnixNano), ServiceName: svc})
					}
				}
			}
		}
	}
	return out, nil
}

// Severity numbers of the OpenTelemetry log data model, by the level names iii's functions use.
var severities = map[string]int{"trace": 1, "debug": 5, "info": 9, "warn": 13, "error": 17}

func severityText(n int) string {
	switch {
	case n >= 21:
		return "FATAL"
	case n >= 17:
		return "ERROR"
	case n >= 13:
		return "WARN"
	case n >= 9:
		return "INFO"
	case n >= 5:
		return "DEBUG"
	case n >= 1:
		return "TRACE"
	}
	return "UNSPECIFIED"
}
