"""`mlts validate`: a VTS/CTS-style conformance run of any driver (docs/validate.md).

`core` holds the framework (CaseResult, Target, SuiteOptions, the suite registry),
`reproducer` the reproducer files, `replay` runs them again, `runner` runs suites
and gathers results, `results` is the `validate` section of results.json, and
`junit`/`html` write the other outputs. Suites: `validation`, `operations`,
`behaviour`, `fuzz`.
"""
