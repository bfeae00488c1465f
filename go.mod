module apollo

go 1.26.8

require (
	github.com/gofrs/flock v0.13.2
	github.com/robfig/cron/v3 v3.0.1
	github.com/rogpeppe/go-internal v1.16.0
	github.com/spf13/pflag v1.1.0
	github.com/yuin/gopher-lua v1.1.2
	golang.org/x/sys v0.50.0
	gopkg.in/yaml.v3 v3.0.1
)

require golang.org/x/tools v0.26.0 // indirect
