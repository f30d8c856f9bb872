"""The classes of construct [capture-2] item 2 names, each with the catalogue cases that
cover it (at least three each: test_catalogue.py::test_every_class_has_three_cases)."""

CLASSES = {
    # constants and containers
    "tuples/lists/dicts/sets built, concatenated, sliced, unpacked, compared, `in`": [
        "tuple_concat_empty", "list_concat", "tuple_repeat_and_slice", "tuple_unpack_nested",
        "tuple_unpack_star_middle", "tuple_compare", "tuple_in_and_index_count",
        "set_build_and_in", "nested_container_equality"],
    "dict methods (get, pop, update, copy, items/keys/values, setdefault, dict(...), "
    "dict(zip(...)))": [
        "dict_get_with_default", "dict_pop_and_default", "dict_update_and_copy",
        "dict_items_keys_values", "dict_setdefault", "dict_constructor_kwargs_pairs",
        "dict_zip"],
    "list methods (append, extend, insert, pop, clear, reverse, sort, slice assignment)": [
        "list_append_extend_insert", "list_pop_variants", "list_clear_and_reverse",
        "list_sort_python_values", "list_sort_with_key", "list_slice_assignment"],
    "list(), tuple(), set(), reversed, sorted, iter/next": [
        "tuple_list_set_conversions", "reversed_and_sorted_values", "iter_next_on_list",
        "sorted_with_key_lambda", "list_from_range_and_tuple"],
    # functional builtins and the standard library
    "map, filter, zip, enumerate, range": [
        "map_over_tensors", "map_two_iterables", "filter_lambda_and_none",
        "zip_strict_lengths_and_unzip", "enumerate_start", "range_arithmetic_and_len"],
    "any/all": ["any_all_on_values", "any_all_generator", "assert_on_container_contents"],
    "functools.reduce and partial": [
        "functools_reduce_tensors", "functools_reduce_operator", "functools_partial_call",
        "functools_partial_of_torch_fn"],
    "itertools.chain/islice/product": [
        "itertools_chain", "itertools_islice", "itertools_product",
        "itertools_chain_from_iterable"],
    "operator.*": ["operator_functions_on_tensors", "operator_getitem_itemgetter",
                   "operator_attrgetter", "operator_on_constants"],
    "math.*": ["math_functions_on_constants", "math_on_sizes", "math_inf_nan_checks",
               "math_trig_constants"],
    "isinstance/issubclass/type/callable/hasattr/getattr/setattr": [
        "isinstance_tuple_of_types", "issubclass_builtins_and_modules", "type_comparisons",
        "callable_builtin", "getattr_default_on_object", "hasattr_on_module_and_tensor",
        "setattr_on_object"],
    "identity tests": ["identity_tests", "identity_of_singletons", "list_copy_independent"],
    "str methods": ["str_methods", "str_predicates", "str_strip_partition_split",
                    "str_join_generator", "str_concat_and_repeat"],
    "f-strings and format on constants and sizes": [
        "fstrings_on_constants", "fstring_on_sizes", "fstring_conversions",
        "str_format_method"],
    "import statements inside functions": [
        "import_inside_function", "from_import_inside_function",
        "import_functools_itertools_inside"],
    # classes
    "super() (zero- and two-argument)": [
        "super_zero_arg_forward", "super_two_arg_method", "super_chain_three_levels",
        "super_in_plain_class", "subclass_object_with_super_init"],
    "properties": ["property_on_module", "property_on_plain_object",
                   "plain_object_with_method_and_property"],
    "staticmethod and classmethod": [
        "staticmethod_call", "classmethod_call", "staticmethod_in_module_forward",
        "classmethod_factory_and_staticmethod"],
    "__call__": ["dunder_call_on_object", "module_methods", "sequential"],
    "dataclasses returned or passed": [
        "dataclass_input_fields", "dataclass_passed_to_helper",
        "dataclass_constructed_and_used", "dataclass_constructed_and_returned"],
    "NamedTuple returned or passed": [
        "namedtuple_input_fields", "typing_namedtuple_input_returned",
        "namedtuple_unpack_and_index", "namedtuple_constructed_and_returned",
        "max_namedtuple_fields_into_helper"],
    "objects of Python classes made inside the frame": [
        "dataclass_constructed_and_returned", "plain_object_with_method_and_property",
        "object_made_inside_stored_in_an_input_list", "classmethod_factory_and_staticmethod",
        "user_context_manager_class", "object_made_mutated_and_stored"],
    "frozen dataclasses, own __setattr__, __slots__ made inside the frame": [
        "frozen_dataclass_constructed_in_forward", "frozen_dataclass_returned",
        "own_setattr_logs_writes", "slots_object_made_and_mutated"],
    "nn.Module construction inside forward": [
        "module_constructed_in_forward", "module_constructed_in_module_forward",
        "functional_module_chain_built_inline"],
    "self.parameters(), named_parameters(), children(), modules()": [
        "iterate_self_parameters", "named_parameters_names", "children_iteration",
        "modules_iteration_isinstance", "named_children_names", "buffers_iteration"],
    "ModuleList/ModuleDict/Sequential indexing and slicing": [
        "sequential_index_and_negative", "sequential_slice", "module_list_index_and_slice",
        "module_list_reversed_and_zip", "module_dict_keys_values_items",
        "module_dict_get_by_string_key", "nested_sequential_indexing"],
    # tensors
    "len(t)": ["len_of_tensor_in_loop", "isinstance_len_getattr_hasattr",
               "dataclass_constructed_and_returned"],
    "t.device and t.to(x.device)": [
        "device_to_same_device", "factory_on_input_device", "device_comparison",
        "device_strings_in_factories"],
    "t.new_*": ["new_zeros_ones_full", "new_empty_filled_and_new_tensor_shape",
                "tensor_size_with_dim_keyword"],
    "t.dtype comparisons": ["dtype_equality_branches", "dtype_is_floating_point",
                            "dtype_in_tuple"],
    "ember.finfo / iinfo": ["finfo_eps_min_max", "finfo_masked_fill_min_softmax",
                            "finfo_of_named_dtypes", "iinfo_bounds",
                            "iinfo_of_int_tensor_dtype", "finfo_iinfo_chosen_by_dtype"],
    "ember.device(...) constants": ["device_constant_cpu", "device_constant_global",
                                    "device_from_string_with_index",
                                    "device_strings_in_factories"],
    "x.shape arithmetic": ["shape_tuple_arithmetic", "shape_negative_index_and_slice",
                           "view_with_computed_heads", "shape_arithmetic"],
    "max()/min() of a tensor": [
        "builtin_max_min_of_two_tensors", "builtin_max_of_reductions",
        "builtin_max_over_tensor_rows", "builtin_min_over_a_list_of_losses",
        "builtin_max_tensor_and_number_scales", "builtin_min_max_numbers_in_place",
        "builtin_max_norm_floor", "builtin_max_of_losses_requiring_grad_returned",
        "builtin_max_of_reductions_of_two_dtypes"],
    "max()/min() of a tensor and a Python number": [
        "builtin_max_tensor_and_number_scales", "builtin_min_max_numbers_in_place",
        "builtin_max_norm_floor", "builtin_max_of_float_argument_scales_parameter",
        "builtin_max_of_reduction_and_number_times_attribute",
        "builtin_max_min_of_tensor_and_number_returned",
        "builtin_max_of_tensor_and_number_scaled_by_number",
        "builtin_max_of_tensor_and_number_in_branch"],
    "ember.tensor / ember.as_tensor of Python numbers, sizes and nested lists": [
        "tensor_of_python_numbers", "tensor_of_sizes", "tensor_of_nested_lists",
        "as_tensor_of_values_and_of_a_tensor"],
    "ember.tensor of data holding one-element tensors": [
        "tensor_of_a_list_of_reductions", "tensor_of_nested_indexed_elements",
        "tensor_of_reductions_with_dtypes"],
    "ember.tensor of a tensor (a copy; eager's warning replayed)": [
        "tensor_of_a_tensor_copies_it", "tensor_of_a_parameter_detaches_it",
        "tensor_of_a_tensor_in_a_helper"],
    "no_grad()/enable_grad()/set_grad_enabled() blocks": [
        "no_grad_block", "enable_grad_inside_no_grad", "set_grad_enabled_false_block",
        "set_grad_enabled_from_flag", "nested_with_grad_blocks",
        "set_grad_enabled_true_inside_no_grad", "no_grad_decorated_helper",
        "enable_grad_decorated_helper_under_no_grad"],
    "autocast-free `with` blocks in general": [
        "user_context_manager_class", "contextlib_nullcontext",
        "nested_user_context_managers", "with_blocks_in_sequence"],
    "contextlib.contextmanager blocks": [
        "contextlib_contextmanager", "contextmanager_yielding_a_tensor",
        "contextmanagers_nested_and_in_sequence", "contextmanager_try_finally",
        "contextmanager_with_block_inside", "contextmanager_try_except_nested"],
    "contextlib.contextmanager generators with try/finally or a `with` inside": [
        "contextmanager_try_finally", "contextmanager_with_block_inside",
        "contextmanager_try_except_nested"],
    "exceptions thrown into a suspended contextmanager generator": [
        "contextmanager_catches_lookup_error_of_block",
        "contextmanager_finally_then_outer_except", "contextmanager_swallows_raise_in_block"],
    "__exit__ swallowing the block's exception": [
        "exit_returning_true_swallows_raise", "exit_swallows_keyerror_of_a_lookup",
        "contextlib_suppress_python_error"],
    # closures, generators, recursion, exceptions
    "closures and cells written and read": [
        "closure_cell_written_by_inner", "closure_reads_later_assignment",
        "closure_list_accumulator", "nested_nonlocal_two_levels"],
    "nested functions": ["nested_function_with_defaults_and_kwargs",
                         "nested_function_varargs", "closure_factory_inside"],
    "lambdas": ["lambda_immediately_called_and_stored", "lambda_returning_lambda",
                "lambdas"],
    "generators consumed inside the frame": [
        "generator_function_consumed_by_list", "generator_function_in_for_loop",
        "generator_with_yield_from", "generator_next_calls"],
    "recursion on Python values": ["recursion_factorial_python",
                                   "recursion_over_nested_lists",
                                   "recursion_fibonacci_memo_dict", "recursion_mutual"],
    "exceptions raised and caught on Python values": [
        "try_except_keyerror_on_dict", "try_except_raise_and_catch",
        "try_except_else_finally", "try_except_index_error", "try_except_tuple_of_types"],
    "assert on Python values": ["assert_on_python_values", "assert_on_container_contents",
                                "assert_in_helper"],
}
