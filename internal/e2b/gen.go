package e2b

// The envd protocol's Go code is generated from the vendored protos and
// committed, so a build needs no protoc. To regenerate (protobuf-compiler
// from Debian, the two plugins at the versions in go.mod):
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go
//	go install connectrpc.com/connect/cmd/protoc-gen-connect-go
//	go generate ./internal/e2b
//
//go:generate protoc -I spec --go_out=envdpb --go_opt=paths=source_relative --go_opt=Mprocess/process.proto=github.com/habemus-papadum/hostfork/internal/e2b/envdpb/process --go_opt=Mfilesystem/filesystem.proto=github.com/habemus-papadum/hostfork/internal/e2b/envdpb/filesystem --connect-go_out=envdpb --connect-go_opt=paths=source_relative --connect-go_opt=Mprocess/process.proto=github.com/habemus-papadum/hostfork/internal/e2b/envdpb/process --connect-go_opt=Mfilesystem/filesystem.proto=github.com/habemus-papadum/hostfork/internal/e2b/envdpb/filesystem process/process.proto filesystem/filesystem.proto
