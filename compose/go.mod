module github.com/iii-go/iii/compose

go 1.26.0

require (
	github.com/Masterminds/semver/v3 v3.5.0
	github.com/google/go-cmp v0.7.0
	golang.org/x/sys v0.50.0
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/iii-go/iii/engine v0.0.0
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3
)

require (
	github.com/coder/websocket v1.8.15 // indirect
	github.com/gobwas/httphead v0.1.0 // indirect
	github.com/gobwas/pool v0.2.1 // indirect
	github.com/gobwas/ws v1.4.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/iii-go/iii/internal/base v0.0.0
	golang.org/x/text v0.14.0 // indirect
)

replace github.com/iii-go/iii/engine => ../engine

replace github.com/iii-go/iii/internal/base => ../internal/base
