// Package meta holds repository-wide checks that are tests of the module as a
// whole rather than of one package: every package has exactly one package doc
// comment, the library packages never depend on the CLI framework (cobra)
// or on net/http (STYLE.md, habits 1 and 9), and every import follows the
// layers written in ARCHITECTURE.md (TestImportDirection).
//
// It has no non-test code and nothing imports it.
package meta
