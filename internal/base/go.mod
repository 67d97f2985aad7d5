module github.com/iii-go/iii/internal/base

go 1.26.0

require (
	github.com/google/go-cmp v0.7.0
	gopkg.in/yaml.v3 v3.0.1
)
