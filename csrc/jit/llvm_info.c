/* llvm_info.c: what LLVM reports about this machine (for python -m ember.verify). */
#include "ember.h"

#include <llvm-c/Core.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm/Config/llvm-config.h>

PyObject *
em_llvm_info(PyObject *self, PyObject *noargs)
{
    unsigned major = LLVM_VERSION_MAJOR, minor = LLVM_VERSION_MINOR, patch = LLVM_VERSION_PATCH;
    char *cpu = LLVMGetHostCPUName();
    char *features = LLVMGetHostCPUFeatures();
    char *triple = LLVMGetDefaultTargetTriple();
    PyObject *res = Py_BuildValue("{s(III)ssssssss}", "version", major, minor, patch,
                                  "built_against", EMBER_LLVM_VERSION, "cpu", cpu,
                                  "features", features, "triple", triple);
    LLVMDisposeMessage(cpu);
    LLVMDisposeMessage(features);
    LLVMDisposeMessage(triple);
    return res;
}
