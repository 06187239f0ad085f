package storage_test

import (
	"encoding/json"

	"github.com/habemus-papadum/hostfork/internal/storage"
)

func marshalTree(t storage.Tree) (string, error) {
	b, err := json.Marshal(t)
	return string(b), err
}

func unmarshalTree(s string) (storage.Tree, error) {
	var t storage.Tree
	err := json.Unmarshal([]byte(s), &t)
	return t, err
}
