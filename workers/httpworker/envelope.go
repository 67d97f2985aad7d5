package httpworker

import (
	"net/http"

	"github.com/google/uuid"

	"github.com/iii-go/iii/engine/protocol"
	"github.com/iii-go/iii/internal/base/errcode"
)

// Codes of the error envelope that iii's http worker also sends.
const (
	// CodeNotFound answers 404 to a request no route serves.
	CodeNotFound = "NOT_FOUND"
	// CodeConditionNotMet answers 422 (with "skipped": true) when the route's condition says no.
	CodeConditionNotMet = "CONDITION_NOT_MET"
	// CodeMiddlewareTimeout answers 504 when a middleware function does not answer within
	// default_timeout.
	CodeMiddlewareTimeout = "MIDDLEWARE_TIMEOUT"
	// CodeInternalError answers 500 when a middleware function answers something that is neither
	// {action: "continue"} nor {action: "respond"}.
	CodeInternalError = "INTERNAL_ERROR"
)

// envelope is the body of every error the worker answers itself, as iii's http worker sends it:
// {error: {code, message, error_id?}}. ErrorID is set on 5xx answers only, and the same id is
// logged with the cause, so an operator finds the log line of a response a client reports.
type envelope struct {
	Error   envelopeError `json:"error"`
	Skipped bool          `json:"skipped,omitempty"`
}

type envelopeError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	ErrorID string `json:"error_id,omitempty"`
}

// answerError writes the error envelope for status, code and msg. A 5xx answer gets a fresh
// error_id (a UUID), logged at error level with the request, the message and attrs.
func (s *Server) answerError(w http.ResponseWriter, r *http.Request, status int, code, msg string, attrs ...any) {
	body := envelope{Error: envelopeError{Code: code, Message: msg}}
	if status >= 500 {
		body.Error.ErrorID = uuid.NewString()
		s.log.Error("http request failed", append([]any{"error_id", body.Error.ErrorID, "status", status, "code", code,
			"message", msg, "method", r.Method, "path", r.URL.Path}, attrs...)...)
	}
	writeJSON(w, status, body)
}

// failCall answers a failed call of function fn (role says which: "handler", "condition" or
// "middleware"): 504 when it did not answer within default_timeout (MIDDLEWARE_TIMEOUT for a
// middleware, else the call's own timeout code), 502 when no worker serves fn, else 500 with
// the function's own error code and message. A stack trace is logged, never sent.
func (s *Server) failCall(w http.ResponseWriter, r *http.Request, role, fn string, err error) {
	pe := protocol.AsError(err)
	status, code, msg := http.StatusInternalServerError, pe.Code, pe.Message
	switch pe.Code {
	case errcode.Timeout, errcode.ClientTimeout:
		status = http.StatusGatewayTimeout
		if role == "middleware" {
			code = CodeMiddlewareTimeout
			msg = "middleware " + fn + " did not answer within default_timeout: " + pe.Message
		}
	case errcode.FunctionNotFound:
		status = http.StatusBadGateway
	}
	attrs := []any{"role", role, "function_id", fn}
	if pe.Stacktrace != "" {
		attrs = append(attrs, "stacktrace", pe.Stacktrace)
	}
	s.answerError(w, r, status, code, msg, attrs...)
}
