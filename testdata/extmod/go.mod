module example.com/hostfork-extmod

go 1.26.0

require github.com/habemus-papadum/hostfork v0.0.0

require (
	github.com/coreos/go-systemd/v22 v22.7.0 // indirect
	github.com/godbus/dbus/v5 v5.2.4 // indirect
	github.com/mattn/go-sqlite3 v1.14.53 // indirect
	github.com/moby/sys/mountinfo v0.7.2 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/sys v0.50.0 // indirect
)

// The library as it is in this repository.
replace github.com/habemus-papadum/hostfork => ../..
