// The schemas' text (serialization/schema/*.fbs, common.fbs folded in), embedded at build time
// so that the JSON form can be read and written without the schema files.
#pragma once

namespace dflow::serialization {

const char* GraphSchemaText();
const char* CheckpointSchemaText();

}  // namespace dflow::serialization
