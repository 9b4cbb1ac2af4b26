// A stand-in for Apple's <Foundation/Foundation.h> so clang++ can check the Metal home
// (csrc/gpu/metal/*.mm) for syntax and types off Apple platforms. It declares only what the home
// uses, with the SDK's signatures, nullability and enum spellings; nothing here runs or links.
// Availability attributes are left out (this check does not judge deployment targets).
#pragma once

#include <limits.h>
#include <stdint.h>

typedef unsigned long NSUInteger;
typedef long NSInteger;
#define NSUIntegerMax ULONG_MAX
// BOOL is bool on arm64 (signed char on x86-64 macOS).
typedef bool BOOL;
#define YES true
#define NO false
#ifndef nil
#define nil nullptr
#endif

#define NS_ASSUME_NONNULL_BEGIN _Pragma("clang assume_nonnull begin")
#define NS_ASSUME_NONNULL_END _Pragma("clang assume_nonnull end")
#define NS_RETURNS_RETAINED __attribute__((ns_returns_retained))
#define NS_RETURNS_INNER_POINTER __attribute__((objc_returns_inner_pointer))
// As the SDK spells them in C++: an enum has a fixed underlying type (so an int does not convert
// to it implicitly); an option set is the integer type plus unnamed constants (so | combines).
#define NS_ENUM(_type, _name) enum _name : _type _name; enum _name : _type
#define NS_OPTIONS(_type, _name) _type _name; enum : _name

NS_ASSUME_NONNULL_BEGIN

@class NSString;

@protocol NSObject
- (BOOL)isEqual:(nullable id)object;
@property (readonly) NSUInteger hash;
@end

__attribute__((objc_root_class))
@interface NSObject <NSObject>
+ (instancetype)new;
+ (instancetype)alloc;
- (instancetype)init;
@end

@protocol NSCopying
- (id)copyWithZone:(nullable void*)zone;
@end

typedef struct _NSRange {
    NSUInteger location;
    NSUInteger length;
} NSRange;

static inline NSRange NSMakeRange(NSUInteger loc, NSUInteger len) {
    NSRange r;
    r.location = loc;
    r.length = len;
    return r;
}

@interface NSString : NSObject <NSCopying>
@property (readonly) NSUInteger length;
+ (nullable instancetype)stringWithUTF8String:(const char*)nullTerminatedCString;
@property (nullable, readonly) const char* UTF8String NS_RETURNS_INNER_POINTER;
@end

typedef NSString* NSErrorDomain;

@interface NSError : NSObject <NSCopying>
@property (readonly, copy) NSErrorDomain domain;
@property (readonly) NSInteger code;
@property (readonly, copy) NSString* localizedDescription;
@end

@interface NSArray<__covariant ObjectType> : NSObject <NSCopying>
@property (readonly) NSUInteger count;
- (ObjectType)objectAtIndex:(NSUInteger)index;
- (ObjectType)objectAtIndexedSubscript:(NSUInteger)idx;
@end

NS_ASSUME_NONNULL_END
