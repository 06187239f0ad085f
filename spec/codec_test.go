package spec

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/jsonfast/jsonfasttest"
)

type environmentNoCodec Environment

func TestEnvironmentEncodesAsEncodingJSON(t *testing.T) {
	f := jsonfasttest.New(7, 8)
	for i := range 3000 {
		var e Environment
		f.Fill(reflect.ValueOf(&e).Elem())
		jsonfasttest.SameEncoding(t, fmt.Sprintf("request %d", i), &e, (*environmentNoCodec)(&e))
	}
}
