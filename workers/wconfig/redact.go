package wconfig

import "net/url"

// RedactURL is u for logs, errors and status functions: its user information and every
// query value replaced.
func RedactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	if p.User != nil {
		p.User = url.User("REDACTED")
	}
	q := p.Query()
	for k := range q {
		q.Set(k, "REDACTED")
	}
	p.RawQuery = q.Encode()
	return p.String()
}
