// Package helloworld is the Greeter service's protocol buffer messages and gRPC stubs,
// generated from helloworld.proto. To regenerate them, run `go generate` here with
// protoc, protoc-gen-go and protoc-gen-go-grpc on PATH.
package helloworld

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative helloworld.proto
